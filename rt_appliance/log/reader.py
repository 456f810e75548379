"""Reading one stream file: its header, then blocks of records, in bounded memory.

A :class:`FileReader` reads ``READ_CHUNK_BYTES`` at a time with ``pread`` and
hands out :class:`Block` objects: runs of message records from one source (the
file's own topic and host in a publisher log; one range's source in the merged
log). Where the valid records end it reports why, and tells a torn tail (the end
of the valid log) from corruption (a bad record followed by a valid one, or any
damage in a file that is not the last one), following ``docs/RECOVERY.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import CorruptLogError
from rt_appliance.limits import MAX_BATCH_MESSAGES, READ_CHUNK_BYTES
from rt_appliance.log.format import (
    FILE_KIND_MERGED,
    RECORD_HEADER,
    FileHeader,
    decode_file_header,
    decode_range,
)
from rt_appliance.log.scan import Scan, Stop, check_record, scan

__all__ = ["Block", "FileReader", "TailState", "read_header"]

_MAX_HEADER_BYTES = 1024


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
    past the end: being written, or torn) or "torn" (a bad record with nothing
    valid after it). Corruption is raised, never returned.
    """

    offset: int
    kind: str
    reason: str = ""


def read_header(path: Path, fd: int) -> FileHeader:
    """Decode the header of an open stream file or raise :class:`CorruptLogError`."""
    header = decode_file_header(os.pread(fd, _MAX_HEADER_BYTES, 0))
    if isinstance(header, str):
        raise CorruptLogError(str(path), 0, header)
    return header


class FileReader:
    """Reads blocks of records from one stream file, from a byte offset on."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
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
        self.tail: TailState | None = None
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

    def read_block(self, limit: int = MAX_BATCH_MESSAGES, decode: bool = True) -> Block | None:
        """The next block of up to ``limit`` records, or None at the end of the valid data.

        At None, :attr:`tail` says what stopped reading. Call again later to pick
        up records appended since (follow mode).
        """
        self.tail = None
        chunk = max(READ_CHUNK_BYTES, RECORD_HEADER.size)
        while True:
            if self.merged and self.offset >= self._range_end and not self._enter_range():
                return None
            buf = os.pread(self._fd, chunk, self.offset)
            want = limit
            records = scan(buf, 0, want, decode)
            if self.merged:
                records = _clip(records, self._range_end - self.offset)
                if records.stop_offset > self._range_end - self.offset:
                    raise CorruptLogError(str(self.path), self.offset, "range ends inside a record")
            if records.offsets:
                base = self.offset
                records.offsets = [base + o for o in records.offsets]
                records.start += base
                records.stop_offset += base
                self.offset = records.stop_offset
                return Block(self._topic, self._host, records)
            if records.stop is Stop.NEED_MORE and self._needs_bigger_chunk(buf):
                chunk = self._record_size(buf)
                continue
            if records.stop is Stop.RANGE and not self.merged:
                raise CorruptLogError(str(self.path), self.offset, "range record in a publisher log")
            self.tail = self._classify(records, buf)
            return None

    def _needs_bigger_chunk(self, buf: bytes) -> bool:
        return len(buf) >= RECORD_HEADER.size and self._record_size(buf) > len(buf)

    def _record_size(self, buf: bytes) -> int:
        length: int = RECORD_HEADER.unpack_from(buf, 0)[1]
        return RECORD_HEADER.size + length if self.offset + RECORD_HEADER.size + length <= self.size() else 0

    def _enter_range(self) -> bool:
        """Read the range record at :attr:`offset` (merged log) and take its source."""
        buf = os.pread(self._fd, RECORD_HEADER.size + 1024, self.offset)
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
            if not self._enter_range():
                raise CorruptLogError(str(self.path), self.offset, "no range record here")
            if self._range_end >= offset:
                self.offset = offset
                return
            self.offset = self._range_end
        if self.offset != offset:
            raise CorruptLogError(str(self.path), offset, "position is not inside a range")

    def _classify(self, records: Scan, buf: bytes) -> TailState:
        """Turn the stop of an empty scan at :attr:`offset` into a tail or an error."""
        size = self.size()
        if self.offset >= size:
            return TailState(self.offset, "clean")
        kind, end, problem = check_record(buf, 0)
        if problem == "incomplete" or (problem and self.offset + end >= size):
            return TailState(self.offset, "incomplete" if problem == "incomplete" else "torn", problem)
        if problem and end > 0:
            after = os.pread(self._fd, RECORD_HEADER.size + (1 << 16), self.offset + end)
            if check_record(after, 0)[2] == "":
                raise CorruptLogError(str(self.path), self.offset, f"{problem}, valid records follow")
        return TailState(self.offset, "torn", problem or records.reason)


def _clip(records: Scan, room: int) -> Scan:
    """Keep only the records that lie inside the current merged-log range."""
    if records.stop_offset <= room:
        return records
    keep = sum(1 for o in records.offsets if o < room)
    records.stop_offset = records.offsets[keep]
    del records.offsets[keep:]
    records.timestamps_ns, records.ids = records.timestamps_ns[:keep], records.ids[:keep]
    records.payloads = records.payloads[:keep]
    records.stop = Stop.LIMIT
    return records
