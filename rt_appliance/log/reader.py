"""Reading one stream file: its header, then blocks of records, in bounded memory.

A :class:`FileReader` reads ``READ_CHUNK_BYTES`` at a time with ``pread`` and
hands out :class:`Block` objects: runs of message records from one source (the
file's own topic and host in a publisher log; one range's source in the merged
log). Where the valid records end it reports why, and tells a torn tail (the end
of the valid log) from corruption (a bad record followed by a valid one, or any
damage in a file that is not the last one), following ``docs/RECOVERY.md``.
"""

from __future__ import annotations

import bisect
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import CorruptLogError, InvalidPositionError
from rt_appliance.limits import (
    FOLLOW_CHUNK_BYTES,
    MAX_BATCH_MESSAGES,
    MAX_FILE_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    RANGE_READ_BYTES,
    READ_CHUNK_BYTES,
)
from rt_appliance.log.format import (
    FILE_KIND_MERGED,
    KIND_MESSAGE,
    KIND_RANGE,
    RECORD_HEADER,
    FileHeader,
    decode_file_header,
    decode_range,
)
from rt_appliance.log.scan import Scan, Stop, check_record, scan, scan_columns

__all__ = ["Block", "FileReader", "TailState", "find_valid_record", "read_header"]


@dataclass(slots=True)
class Block:
    """Message records of one source, back to back in one file."""

    topic: str
    host: str
    records: Scan


@dataclass(frozen=True, slots=True)
class TailState:
    """Where the valid records of a file end, and what lies after them.

    ``kind`` is "clean" (the file ends exactly there), "incomplete" (a record runs
    past the end: being written, or torn), "torn" (a bad record with nothing
    valid after it) or "large" (a whole record larger than the reader's
    ``max_record_bytes``, left for the caller to read in pieces). Corruption is
    raised, never returned.
    """

    offset: int
    kind: str
    reason: str = ""


def read_header(path: Path, fd: int) -> FileHeader:
    """Decode the header of an open stream file or raise :class:`CorruptLogError`."""
    header = decode_file_header(os.pread(fd, MAX_FILE_HEADER_BYTES, 0))
    if isinstance(header, str):
        raise CorruptLogError(str(path), 0, header)
    return header


class FileReader:
    """Reads blocks of records from one stream file, from a byte offset on."""

    def __init__(self, path: Path, offset: int = 0, *, strict_tail: bool = False) -> None:
        """Open ``path`` to read from byte ``offset`` (0: after the header).

        ``strict_tail`` makes the end of the valid records a corruption error also
        when a record that runs past the end of the file hides valid records
        (verification and writer recovery; a follower must not, since the writer
        may be in the middle of that record).
        """
        self.path = path
        self._strict_tail = strict_tail
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.header = read_header(path, self._fd)
        except BaseException:
            os.close(self._fd)
            raise
        self.offset = max(offset, self.header.header_bytes)
        self.merged = self.header.kind == FILE_KIND_MERGED
        # In a publisher log the file names the source; in the merged log a range does.
        self._topic, self._host = self.header.topic, self.header.host
        self._range_end = self.offset if self.merged else -1
        self._buf, self._buf_at = b"", 0  # bytes last read, and the file offset of their start
        # How much the next read asks for: small while following a file's end (a read
        # allocates what it asks for), doubling up to READ_CHUNK_BYTES through a backlog.
        self._chunk = FOLLOW_CHUNK_BYTES
        self.tail: TailState | None = None
        # A whole record larger than this stops a block read with tail "large" instead of
        # being read into memory at once (replication sends such a record in pieces).
        self.max_record_bytes: int | None = None
        if self.merged and self.offset > self.header.header_bytes:
            self._find_range(self.offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def pread(self, nbytes: int, offset: int) -> bytes:
        """Up to ``nbytes`` raw bytes of the file from ``offset``."""
        return os.pread(self._fd, nbytes, offset)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        """Like :meth:`pread`, from the bytes kept by the last block read when they cover it."""
        start = offset - self._buf_at
        if start >= 0 and start + nbytes <= len(self._buf):
            return self._buf[start : start + nbytes]
        return os.pread(self._fd, nbytes, offset)

    def read_block(
        self,
        limit: int = MAX_BATCH_MESSAGES,
        decode: bool = True,
        verify: bool = True,
        columns: bool = False,
    ) -> Block | None:
        """The next block of up to ``limit`` records, or None at the end of the valid data.

        At None, :attr:`tail` says what stopped reading. Call again later to pick
        up records appended since (follow mode). ``verify`` False walks record
        boundaries without checking CRCs: the caller must check them. Bytes are
        read ``READ_CHUNK_BYTES`` at a time and kept, so a small ``limit`` does not
        read the file many times. ``columns`` gives the records as packed columns
        (:func:`scan_columns`, always checked) instead of lists.
        """
        self.tail = None
        chunk = self._chunk
        fresh = False  # whether the buffer was read in this call, starting at self.offset
        while True:
            if self.merged and self.offset >= self._range_end and not self._enter_range():
                return None
            start = self.offset - self._buf_at
            if fresh or not 0 <= start < len(self._buf):
                self._buf, self._buf_at = os.pread(self._fd, chunk, self.offset), self.offset
                start, fresh = 0, True
                full = len(self._buf) == chunk
                self._chunk = min(chunk * 2, READ_CHUNK_BYTES) if full else FOLLOW_CHUNK_BYTES
            buf, base = self._buf, self._buf_at
            records = (
                scan_columns(buf, start, limit)
                if columns
                else scan(buf, start, limit, decode, verify)
            )
            if self.merged and records.count:
                _clip(records, self._range_end - base)
                if not records.count:  # the first record runs past the range's end
                    raise CorruptLogError(str(self.path), self.offset, "range ends inside a record")
            if records.count:
                records.rebase(base)
                self.offset = records.stop_offset
                return Block(self._topic, self._host, records)
            if not fresh:  # the kept bytes ran out: read the file again from here
                fresh = True
                continue
            if records.stop is Stop.NEED_MORE and self._needs_bigger_chunk(buf):
                chunk = self._record_size(buf)
                if self.max_record_bytes is not None and chunk > self.max_record_bytes:
                    self.tail = TailState(self.offset, "large", f"a record of {chunk} bytes")
                    return None
                continue
            if records.stop is Stop.RANGE:
                where = "a publisher log" if not self.merged else "the bytes of a range"
                raise CorruptLogError(str(self.path), self.offset, f"range record in {where}")
            self.tail = self._classify(records, buf)
            return None

    def check_large(self, offset: int) -> tuple[int, str]:
        """Check the whole record at ``offset`` reading it a few MiB at a time (for records
        too large to hold at once); returns its end and "" or the problem.

        A bad record with a valid one after it is corruption (:class:`CorruptLogError`);
        with nothing valid after it, the tail becomes "torn" like any other bad tail.
        """
        head = os.pread(self._fd, RECORD_HEADER.size, offset)
        crc, length, kind, flags, reserved, _, _ = RECORD_HEADER.unpack(head)
        end = offset + RECORD_HEADER.size + length
        if self.merged and end > self._range_end:
            raise CorruptLogError(str(self.path), offset, "range ends inside a record")
        problem = f"unknown kind {kind} or flags {flags}/{reserved}"
        if kind == KIND_MESSAGE and not flags and not reserved:
            running, at = zlib.crc32(head[4:]), offset + RECORD_HEADER.size
            while at < end:
                piece = os.pread(self._fd, min(READ_CHUNK_BYTES, end - at), at)
                if not piece:
                    break
                running, at = zlib.crc32(piece, running), at + len(piece)
            problem = "" if at == end and running == crc else "CRC mismatch"
        if problem:
            found = find_valid_record(self._fd, offset + 1, self.size())
            if found is not None:
                why = f"{problem}; a valid record follows at offset {found}"
                raise CorruptLogError(str(self.path), offset, why)
            self.offset = offset
            self.tail = TailState(offset, "torn", problem)
        return end, problem

    def _needs_bigger_chunk(self, buf: bytes) -> bool:
        return len(buf) >= RECORD_HEADER.size and self._record_size(buf) > len(buf)

    def _whole_now(self) -> bool:
        """Whether the record at :attr:`offset`, read again now, is whole and valid."""
        head = os.pread(self._fd, RECORD_HEADER.size, self.offset)
        if len(head) < RECORD_HEADER.size:
            return False
        size = self._record_size(head)
        return size > 0 and not check_record(os.pread(self._fd, size, self.offset), 0)[2]

    def _record_size(self, buf: bytes) -> int:
        length: int = RECORD_HEADER.unpack_from(buf, 0)[1]
        fits = self.offset + RECORD_HEADER.size + length <= self.size()
        return RECORD_HEADER.size + length if fits else 0

    def skip_to(self, offset: int) -> bool:
        """Go on at ``offset`` of a merged file without reading what lies before it: the
        caller holds those bytes, whole merged records starting where the last one read
        ended. False (nothing moved) unless reading stands at the end of a range."""
        if not self.merged or self.offset != self._range_end or offset < self.offset:
            return False
        self.offset = self._range_end = offset
        self._buf, self._buf_at = b"", 0
        self.tail = None
        return True

    def _enter_range(self) -> bool:
        """Read the range record at :attr:`offset` (merged log) and take its source."""
        buf = os.pread(self._fd, RECORD_HEADER.size + RANGE_READ_BYTES, self.offset)
        kind, end, problem = check_record(buf, 0)
        if problem:
            self.tail = self._classify(Scan(0, stop=Stop.BAD, reason=problem), buf)
            return False
        header = decode_range(buf[RECORD_HEADER.size : end])
        if isinstance(header, str) or kind != 1:
            raise CorruptLogError(str(self.path), self.offset, f"expected a range record: {header}")
        self._topic, self._host = header.topic, header.host
        self.offset += end
        self._range_end = self.offset + header.range_bytes
        return True

    def _find_range(self, offset: int) -> None:
        """Take the source of the merged-log range that holds ``offset`` (a resume point)."""
        self.offset = self.header.header_bytes
        self._range_end = self.offset
        while self.offset < offset:
            range_start = self.offset
            if not self._enter_range():
                raise InvalidPositionError(f"{self.path}: offset {offset} is past the valid data")
            if range_start < offset < self.offset:
                raise InvalidPositionError(f"{self.path}: offset {offset} is inside a range record")
            if self._range_end >= offset:
                self.offset = offset
                return
            self.offset = self._range_end

    def _classify(self, records: Scan, buf: bytes) -> TailState:
        """Turn the stop of an empty scan at :attr:`offset` into a tail or an error.

        A bad record is a torn tail only if no valid record lies anywhere after
        it: its length field may be the damaged part, so the search does not
        trust it. A record running past the end of the file may be one the writer
        is still writing; it is only searched past with ``strict_tail``.
        """
        size = self.size()
        if self.offset >= size:
            return TailState(self.offset, "clean")
        # Read it again, after the size: a record the writer finished since ``buf`` was
        # read is neither a tail nor damage (a search past it would find the records
        # written after it and call that corruption); the next read takes it.
        _, _, problem = check_record(buf, 0)
        if problem == "incomplete" and self._whole_now():
            return TailState(self.offset, "incomplete", "written while it was read")
        problem = problem or records.reason or "bad record"
        if problem != "incomplete" or self._strict_tail:
            found = find_valid_record(self._fd, self.offset + 1, size)
            if found is not None:
                why = f"{problem}; a valid record follows at offset {found}"
                raise CorruptLogError(str(self.path), self.offset, why)
        return TailState(self.offset, "incomplete" if problem == "incomplete" else "torn", problem)


def find_valid_record(fd: int, start: int, size: int) -> int | None:
    """The offset of the first valid record at or after ``start``, at any byte offset.

    Used after a bad record to tell corruption (valid records follow) from a torn
    tail (nothing valid follows). Candidates are offsets whose flags and reserved
    bytes are zero, as every record's are, so the cost is mostly ``bytes.find``;
    runs of zero bytes (never-written blocks) are skipped whole.
    """
    head = RECORD_HEADER.size
    base = start
    while base + head <= size:
        buf = os.pread(fd, READ_CHUNK_BYTES + head, base)
        last = min(len(buf) - head, READ_CHUNK_BYTES - 1)  # candidates this chunk owns
        cand = 0
        while cand <= last:
            at = buf.find(b"\0\0\0", cand + 9)
            if at < 0 or at - 9 > last:
                break
            cand = at - 9
            if buf[cand : cand + head] == _ZERO_HEADER:
                nonzero = _NONZERO.search(buf, cand + head)
                cand = max(cand + 1, (nonzero.start() if nonzero else len(buf)) - head + 1)
                continue
            if _is_record(fd, buf, cand, base, size):
                return base + cand
            cand += 1
        base += READ_CHUNK_BYTES
    return None


_ZERO_HEADER = bytes(RECORD_HEADER.size)
_NONZERO = re.compile(rb"[^\x00]")


def _is_record(fd: int, buf: bytes, cand: int, base: int, size: int) -> bool:
    """Whether a valid record starts at ``buf[cand]`` (``base + cand`` in the file)."""
    kind, length = buf[cand + 8], int.from_bytes(buf[cand + 4 : cand + 8], "little")
    if kind not in (KIND_MESSAGE, KIND_RANGE) or length > MAX_PAYLOAD_BYTES:
        return False
    end = cand + RECORD_HEADER.size + length
    if base + end > size:
        return False
    if end <= len(buf):
        return check_record(buf, cand)[2] == ""
    return check_record(os.pread(fd, end - cand, base + cand), 0)[2] == ""


def _clip(records: Scan, room: int) -> None:
    """Keep only the records that end inside the current merged-log range (``room`` bytes)."""
    if records.stop_offset > room:
        records.head(bisect.bisect_right(records.ends(), room))
