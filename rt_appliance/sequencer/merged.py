"""This node's merged log: ``merged/log.1.R``, written only by the sequencer's merger.

Every record is a range record (its id is the merge sequence number) followed by
the input records it covers. File names, headers (stamped with the timestamp of
the instruction that opened the file) and contents are decided by raft, so the
files are byte-identical on every node.

On start the newest file is scanned: a torn tail (a crash mid-write) is cut off
(raft re-applies those instructions), and a file that holds only a header is
removed (the same instruction recreates it identically). Only what follows the synced
marker (``merged/.synced``) is scanned: after a sync the log notes, at most once a
second, where its synced end is and the merged record that ends there. A marker whose
record is not found there, whole and with its sequence number, is ignored and the
whole file is scanned (the scrubber reads every file in the background either way).
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rt_appliance.errors import CorruptLogError, LogError
from rt_appliance.limits import MERGED_MARK_EVERY_S
from rt_appliance.log.format import (
    KIND_RANGE,
    RECORD_HEADER,
    RangeHeader,
    decode_file_header,
    decode_range,
)
from rt_appliance.log.recovery import remove_temporary_files
from rt_appliance.log.scan import check_record, scan
from rt_appliance.log.segments import DirectoryLock, StreamFile, fsync_dir, list_files
from rt_appliance.log.writer import create_stream_file, write_all
from rt_appliance.position import Position
from rt_appliance.sequencer.state import MERGED_SESSION

__all__ = [
    "FileChangedError",
    "MergedLog",
    "MergedRecord",
    "merged_record_size",
    "parse_merged_records",
]


class FileChangedError(LogError):
    """The newest merged file is not the size the merger wrote (cut or grown by someone
    else while the node ran): appending now would put records where they do not belong."""


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MergedRecord:
    """One merged record as found in a file: a range record and the records it covers."""

    seq: int
    offset: int  # in its file
    nbytes: int
    crc: int  # zlib CRC-32 of all ``nbytes``


def parse_merged_records(buf: bytes, base: int) -> tuple[list[MergedRecord], int, str]:
    """Whole merged records of ``buf`` (which starts at file offset ``base``).

    Returns (records, bytes consumed, problem); problem is "" or "incomplete" at a
    clean stop, else what is wrong at the stop.
    """
    records: list[MergedRecord] = []
    off = 0
    while off < len(buf):
        found = _range_at(buf, off)
        if isinstance(found, str):
            return records, off, found
        rng, end = found
        total = end - off + rng.range_bytes
        if off + total > len(buf):
            return records, off, "incomplete"
        inner = scan(buf, end, rng.record_count, decode=False) if rng.record_count else None
        count = len(inner.offsets) if inner is not None else 0
        stop = inner.stop_offset if inner is not None else end
        if count != rng.record_count or stop != off + total:
            return records, off, f"range of {rng.record_count} records does not hold them whole"
        seq = int.from_bytes(buf[off + 20 : off + 28], "little", signed=True)
        records.append(MergedRecord(seq, base + off, total, zlib.crc32(buf[off : off + total])))
        off += total
    return records, off, ""


def merged_record_size(buf: bytes, off: int) -> int | None:
    """The size of the merged record at ``buf[off]`` (its range record and the bytes it
    covers), from its range record alone; None if that is not whole and valid in ``buf``."""
    found = _range_at(buf, off)
    return None if isinstance(found, str) else found[1] - off + found[0].range_bytes


def _range_at(buf: bytes, off: int) -> tuple[RangeHeader, int] | str:
    """The range record at ``buf[off]`` and where it ends, or what is wrong there."""
    kind, end, problem = check_record(buf, off)
    if problem:
        return problem
    if kind != KIND_RANGE:
        return "a message record where a range record was expected"
    length = int.from_bytes(buf[off + 4 : off + 8], "little")
    rng = decode_range(buf[off + RECORD_HEADER.size : off + RECORD_HEADER.size + length])
    return rng if isinstance(rng, str) else (rng, end)


MARKER = ".synced"  # in the merged directory: where the newest file is known synced


@dataclass(frozen=True, slots=True)
class SyncedMark:
    """File ``roll`` is synced up to ``end``; its last record there, ``seq``, starts at
    ``record``."""

    roll: int
    end: int
    record: int
    seq: int


class MergedLog:
    """Appends merged records at the positions raft decided."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._lock = DirectoryLock(directory)
        remove_temporary_files(directory)
        self._fd = -1
        self.roll = -1
        self.size = 0
        self.seq = 0  # id of the last record in the newest file (0: none)
        self._last: tuple[int, int] | None = None  # (offset, seq) of the last record appended
        self._marked_at = 0.0
        self._mark_failed = False  # the last marker could not be written (logged once)
        self.scanned_bytes = 0  # read by the last recovery (the newest file's tail)
        self.recover()

    @property
    def end(self) -> int:
        """Position after the last record (0: empty log)."""
        return 0 if self.roll < 0 else int(Position.of(MERGED_SESSION, self.roll, self.size))

    def files(self) -> list[StreamFile]:
        return list_files(self.directory)

    def recover(self) -> None:
        """Open the newest file at the end of its whole records, cutting a torn tail."""
        self._close()
        while True:
            files = self.files()
            if not files:
                self.roll, self.size, self.seq = -1, 0, 0
                return
            newest = files[-1]
            with open(newest.path, "rb") as f:
                head = f.read(1024)
                size = os.fstat(f.fileno()).st_size
                header = decode_file_header(head)
                if isinstance(header, str):
                    log.warning(
                        "merged log: removing %s with a torn header (%s)", newest.path, header
                    )
                    newest.path.unlink()
                    continue
                start, seq = self._vouched(f, newest.roll, size) or (header.header_bytes, 0)
                f.seek(start)
                tail = f.read()
            self.scanned_bytes = len(tail)
            records, used, problem = parse_merged_records(tail, start)
            if records:
                seq = records[-1].seq
            elif not seq:
                log.warning("merged log: removing %s, which holds no whole record", newest.path)
                newest.path.unlink()
                fsync_dir(self.directory)
                continue
            end = start + used
            if end < size:
                if problem not in ("", "incomplete"):
                    log.warning("merged log: %s at %d: %s", newest.path, end, problem)
                log.warning(
                    "merged log: cutting %d bytes after %s offset %d (raft re-applies them)",
                    size - end,
                    newest.path,
                    end,
                )
                os.truncate(newest.path, end)
            self._open(newest.path)
            self.roll, self.size, self.seq = newest.roll, end, seq
            self._last = (records[-1].offset, seq) if records else None
            return

    def _vouched(self, f: BinaryIO, roll: int, size: int) -> tuple[int, int] | None:
        """(end, seq) of file ``roll`` (open as ``f``, ``size`` bytes) that the synced
        marker vouches for, if its last record is there, whole, with its seq."""
        mark = self.read_mark()
        if mark is None or mark.roll != roll or not mark.record < mark.end <= size:
            return None
        f.seek(mark.record)
        found, used, _problem = parse_merged_records(f.read(mark.end - mark.record), mark.record)
        if len(found) != 1 or used != mark.end - mark.record or found[0].seq != mark.seq:
            log.warning(
                "merged log: the synced marker does not match %s; scanning it whole", f.name
            )
            return None
        return mark.end, mark.seq

    def read_mark(self) -> SyncedMark | None:
        """The synced marker, or None if there is none or it is unreadable."""
        try:
            doc = json.loads((self.directory / MARKER).read_text())
            return SyncedMark(
                int(doc["roll"]), int(doc["end"]), int(doc["record"]), int(doc["seq"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _mark(self) -> None:
        """Note where the log is synced (just after a sync of everything appended)."""
        if self._last is None or self.roll < 0:
            return
        record, seq = self._last
        doc = {"roll": self.roll, "end": self.size, "record": record, "seq": seq}
        tmp = self.directory / (MARKER + ".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(doc))
                f.flush()
                os.fsync(f.fileno())  # whole after a power loss (the rename may be lost:
            os.replace(tmp, self.directory / MARKER)  # then the one before, which holds)
        except OSError as exc:  # a full disk, say: the marker only saves a restart's scan
            tmp.unlink(missing_ok=True)
            if not self._mark_failed:
                log.warning("merged log: cannot note the synced end in %s: %s", MARKER, exc)
            self._mark_failed = True
        else:
            if self._mark_failed:
                log.info("merged log: noting the synced end again")
            self._mark_failed = False

    def append(self, position: int, data: bytes, header: bytes) -> None:
        """Write ``data`` at ``position``; ``header`` starts the file if it is new."""
        pos = Position(position)
        if pos.roll != self.roll:
            if pos.roll < self.roll or pos.offset != len(header):
                raise LogError(f"merged record at {pos} does not follow {Position(self.end)}")
            self._start_file(pos.roll, header)
        if pos.offset != self.size:
            raise LogError(f"merged record at {pos} does not follow {Position(self.end)}")
        path = self.directory / f"log.{MERGED_SESSION}.{self.roll}"
        self._check_size(path)
        write_all(self._fd, data, path, self.size)
        self._last = (self.size, int.from_bytes(data[20:28], "little", signed=True))
        self.size += len(data)
        self.seq = self._last[1]

    def append_raw(self, roll: int, offset: int, data: bytes, last_seq: int) -> None:
        """Copy bytes of a peer's file ``roll`` (header included when ``offset`` is 0)."""
        if roll != self.roll:
            if offset != 0 or roll < self.roll:
                raise LogError(f"copy of roll {roll} offset {offset} after {Position(self.end)}")
            header = decode_file_header(data[:1024])
            if isinstance(header, str):
                raise CorruptLogError(f"peer's log.1.{roll}", 0, header)
            self._start_file(roll, data[: header.header_bytes])
            data, offset = data[header.header_bytes :], header.header_bytes
        if offset != self.size:
            raise LogError(f"copy at roll {roll} offset {offset}, the file ends at {self.size}")
        if data:
            self._check_size(self.directory / f"log.1.{roll}")
            write_all(self._fd, data, self.directory / f"log.1.{roll}", self.size)
            self.size += len(data)
            self.seq = last_seq
            self._last = None  # where its last record starts is not known: no marker

    def _check_size(self, path: Path) -> None:
        """The file is appended to (``O_APPEND``): make sure its end is where the merger
        left it, so that what is appended lands at its committed position."""
        actual = os.fstat(self._fd).st_size
        if actual != self.size:
            raise FileChangedError(
                f"{path} is {actual} bytes but {self.size} were written to it: it was "
                "changed under the merger (cut, or damaged); repairing before appending"
            )

    def sync(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)
            now = time.monotonic()
            if now - self._marked_at >= MERGED_MARK_EVERY_S:
                self._marked_at = now
                self._mark()

    def dup_fd(self) -> int:
        return os.dup(self._fd) if self._fd >= 0 else -1

    def reset(self) -> list[Path]:
        """Remove every file: the log starts again empty (at any roll the next append
        or copy opens). Returns what was removed."""
        self._close()
        self._last = None
        removed = [f.path for f in self.files()]
        for path in removed:
            path.unlink(missing_ok=True)
        if removed:
            fsync_dir(self.directory)
        self.roll, self.size, self.seq = -1, 0, 0
        return removed

    def delete_below(self, roll: int) -> list[Path]:
        """Remove files with a roll below ``roll`` (never the newest); returns them."""
        removed = []
        for f in self.files():
            if f.roll < roll and f.roll != self.roll:
                f.path.unlink(missing_ok=True)
                removed.append(f.path)
        if removed:
            fsync_dir(self.directory)
        return removed

    def close(self) -> None:
        self._close()
        self._lock.release()

    def _start_file(self, roll: int, header: bytes) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
        self._close()
        fd, _ = create_stream_file(self.directory, MERGED_SESSION, roll, header)
        self._fd, self.roll, self.size = fd, roll, len(header)
        self._last = None

    def _open(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
