"""The node's inputs: the replicas under ``in/`` that the push server writes.

For each input directory ``in/<topic>.<host>`` the sequencer needs how far this
node durably holds it (its *extent*: the end of the whole, CRC-valid records of
the newest file, synced to disk), and to read whole records from a position for
merging. Files are read, never written: the push server owns them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.limits import (
    FILE_ENDS_REPORTED,
    INPUT_LISTING_EVERY_S,
    INPUT_SCAN_BYTES,
    MAX_FILE_HEADER_BYTES,
    UNBOUNDED_SCAN_RECORDS,
)
from rt_appliance.log.format import RECORD_HEADER, decode_file_header
from rt_appliance.log.naming import parse_publisher_dir
from rt_appliance.log.scan import Stop, scan
from rt_appliance.log.segments import ListingCache, StreamFile, list_files
from rt_appliance.position import Position
from rt_appliance.replicate.sink import FileEnd

__all__ = [
    "InputDir",
    "Inputs",
    "Records",
    "filter_records",
    "first_record_bytes",
    "whole_records",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Records:
    """Whole records read from one input file: ``data`` covers [start, end)."""

    start: Position
    end: Position
    data: bytes
    ids: list[int]
    offsets: list[int]  # of each record, relative to ``data``
    first_ts: int


def filter_records(records: Records, watermark: int | None) -> tuple[bytes, int, int | None]:
    """The records a merge keeps: all, or for a dedup topic those with id > watermark.

    Returns (bytes, count, new watermark).
    """
    if watermark is None:
        return records.data, len(records.ids), None
    kept: list[bytes] = []
    high = watermark
    ends = [*records.offsets[1:], len(records.data)]
    for record_id, off, end in zip(records.ids, records.offsets, ends, strict=True):
        if record_id > high:
            kept.append(records.data[off:end])
            high = record_id
    return b"".join(kept), len(kept), high


@dataclass(frozen=True, slots=True)
class _Walked:
    """Where a walk of a file ended: its valid end and the last record before it."""

    key: tuple[int, int]  # (session, roll) of the file
    inode: int
    end: int
    last: int  # offset of the last whole record before ``end``; -1: none (the header)
    last_header: bytes  # that record's header: its CRC, length, timestamp and id

    def still_holds(self, fd: int, key: tuple[int, int], st: os.stat_result) -> bool:
        """Whether the walk can go on from ``end``: same file, not cut, same last record."""
        if key != self.key or st.st_ino != self.inode or st.st_size < self.end:
            return False
        if self.last < 0:
            return True
        return os.pread(fd, len(self.last_header), self.last) == self.last_header


class InputDir:
    """One input directory: its files and the valid end of the newest one."""

    def __init__(
        self,
        path: Path,
        sync: bool,
        held: Callable[[str], Position | None] | None = None,
        written: Callable[[str], Position | None] | None = None,
        ended: Callable[[str, tuple[int, int]], FileEnd | None] | None = None,
    ) -> None:
        """``held``/``written``: how far the node's push server has synced/written this
        input (None: no push server in this process; the files alone tell); ``ended``:
        how a file ended, if that push server saw the sender move on from it."""
        self.path, self.name, self._sync, self._held = path, path.name, sync, held
        self._written, self._ended = written, ended
        self._dir = str(path)
        self._listing = ListingCache(path, list_files)
        self._walked: _Walked | None = None  # where the last walk of the newest file ended
        self._synced: tuple[tuple[int, int], int] | None = None

    def files(self) -> list[StreamFile]:
        return self._listing.get()

    def extent(self) -> Position:
        """How far this node durably holds this input (0: nothing yet)."""
        if self._held is not None:  # in the node process: what its push server synced
            known = self._held(self.name)
            if known is not None:
                return known
        files = self.files()
        if not files:
            return Position(0)
        newest = files[-1]
        end = self._valid_end(newest)
        if end is None:
            return Position(0) if len(files) == 1 else _end_of(files[-2])
        if self._sync and self._synced != (newest.key, end):
            try:
                fd = os.open(newest.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return Position(0)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._synced = (newest.key, end)
        return Position.of(newest.session, newest.roll, end)

    def _valid_end(self, f: StreamFile) -> int | None:
        """End of the whole records of ``f``, walking only what is new since the last call.

        The push server checks every CRC before it writes, so new bytes are walked by
        their length fields only. Two cases need more, because another process owns the
        file and cuts it on its start (a torn tail after a crash or a power loss, damage
        found in the last file) before appending again:

        - a walk from the file header checks every record: what a crash left (a record
          of zeros from a block that never reached the disk) must not count;
        - a walk resumes from where the last one ended only if that is still the same
          file, not shorter, and still holds the same last record there. Otherwise the
          file was cut (and maybe written again) meanwhile, and resuming could land in
          the middle of a record: it is walked again from its header.
        """
        try:
            fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            walked = self._walked
            if walked is not None and walked.still_holds(fd, f.key, st):
                end, last, last_header = walked.end, walked.last, walked.last_header
                verify = False
            else:
                if walked is not None and walked.key == f.key:
                    log.warning(
                        "input %s: %s was cut or replaced below %d since it was last read; "
                        "reading it again from its start",
                        self.name,
                        f.path.name,
                        walked.end,
                    )
                header = decode_file_header(os.pread(fd, MAX_FILE_HEADER_BYTES, 0))
                if isinstance(header, str):
                    return None
                end, last, last_header, verify = header.header_bytes, -1, b"", True
            size = st.st_size
            while end < size:
                buf = os.pread(fd, min(INPUT_SCAN_BYTES, size - end), end)
                found = scan(buf, 0, UNBOUNDED_SCAN_RECORDS, decode=False, verify=verify)
                if found.stop_offset == 0:
                    if found.stop is Stop.NEED_MORE and len(buf) >= INPUT_SCAN_BYTES:
                        length = first_record_bytes(buf)
                        buf = os.pread(fd, length, end)
                        found = scan(buf, 0, 1, decode=False, verify=verify)
                    if found.stop_offset == 0:
                        break
                last = end + found.offsets[-1]
                last_header = buf[found.offsets[-1] : found.offsets[-1] + RECORD_HEADER.size]
                end += found.stop_offset
        finally:
            os.close(fd)
        self._walked = _Walked(f.key, st.st_ino, end, last, last_header)
        return end

    def first_record(self) -> Position | None:
        """Where the oldest file's records start."""
        files = self.files()
        if not files:
            return None
        header = _header_bytes(files[0].path)
        return None if header is None else Position.of(files[0].session, files[0].roll, header)

    def next_file_start(self, after: Position) -> Position | None:
        """The first record of the first file after the file of ``after``."""
        for f in self.files():
            if f.key > after.file_key:
                header = _header_bytes(f.path)
                return None if header is None else Position.of(f.session, f.roll, header)
        return None

    def file_ends(self, after: Position, most: int = FILE_ENDS_REPORTED) -> list[int]:
        """Where this node's copies of the files from the one holding ``after`` end (as
        positions), every file but the newest, at most ``most``: what a follower reports
        so that the leader moves its plan past a file's end only where a majority's copies
        end too (a copy cut short looks like a whole file that ended early)."""
        ends: list[int] = []
        for f in self.files()[:-1]:
            if f.key >= after.file_key and len(ends) < most:
                ends.append(int(_end_of(f)))
        return ends

    def file_end(self, at: Position) -> int | None:
        """The valid end of the file ``at`` is in, if this node has that file."""
        files = self.files()
        for f in files:
            if f.key == at.file_key:
                if f.key == files[-1].key:
                    # in the node process, what its push server synced there: records it
                    # checked before writing them, with no walk of the file again
                    held = self._held(self.name) if self._held is not None else None
                    if held is not None and held.file_key == f.key:
                        return held.offset
                    return self._valid_end(f)
                return _end_of(f).offset
        return None

    def unmerged_bytes(self, start: Position) -> int:
        """Record bytes this node holds from ``start`` on (file headers not counted)."""
        files = self.files()
        total = 0
        for f in files:
            if f.key < start.file_key:
                continue
            end = self._valid_end(f) if f.key == files[-1].key else _end_of(f).offset
            begin = start.offset if f.key == start.file_key else _header_bytes(f.path)
            if end is not None and begin is not None:
                total += max(0, end - begin)
        return total

    def read(self, start: Position, limit: Position, max_bytes: int) -> Records | None:
        """Whole records from ``start`` up to ``limit`` (same file) or the file's valid end,
        at most ``max_bytes`` (at least one record); None if there are none here."""
        end_here = self.file_end(start)
        if end_here is None:
            return None
        stop = end_here if limit.file_key != start.file_key else min(end_here, limit.offset)
        return self._read_upto(start, stop, max_bytes)

    def read_written(self, start: Position, max_bytes: int) -> Records | None:
        """Whole records from ``start`` up to what this node's push server has written to
        that file, synced or not, or to where the file ended if the sender was seen moving
        on from it; at most ``max_bytes`` (None: none, or no push server in this process).
        For a range the leader carries in its raft entry."""
        written = self._written(self.name) if self._written is not None else None
        if written is None or written.file_key < start.file_key:
            return None
        if written.file_key == start.file_key:
            return self._read_upto(start, written.offset, max_bytes)
        ended = self.ended(start.file_key)
        return None if ended is None else self._read_upto(start, ended.end, max_bytes)

    def ended(self, key: tuple[int, int]) -> FileEnd | None:
        """How this node's copy of file ``key`` ended, if its push server saw the sender
        move on from it (None: not seen, or no push server in this process)."""
        return None if self._ended is None else self._ended(self.name, key)

    def _read_upto(self, start: Position, stop: int, max_bytes: int) -> Records | None:
        if stop <= start.offset:
            return None
        path = f"{self._dir}/log.{start.session}.{start.roll}"  # no Path: read per step
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        room = stop - start.offset
        try:
            buf = os.pread(fd, min(room, max_bytes), start.offset)
            records = whole_records(start, buf)
            if records is None and room > max_bytes:  # one record larger than max_bytes
                length = first_record_bytes(buf)
                if length > room:  # never past the limit: what a majority holds ends there
                    return None
                records = whole_records(start, os.pread(fd, length, start.offset))
        finally:
            os.close(fd)
        return records

    def read_exact(self, start: Position, end: Position) -> bytes | None:
        """The bytes [start, end) of one file if this node holds them all."""
        path = self.path / f"log.{start.session}.{start.roll}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            data = os.pread(fd, end.offset - start.offset, start.offset)
        finally:
            os.close(fd)
        return data if len(data) == end.offset - start.offset else None

    def rewrite(self, start: Position, data: bytes) -> bool:
        """Write ``data`` (a peer's bytes, checked against a commit) over this copy's
        bytes at ``start``, in place, and sync: repairs damage (a flipped bit, a zeroed
        block) so the next reader finds the right bytes here. Only bytes the copy already
        holds are rewritten; never past the file's end, which the push server appends
        to. Returns whether it wrote."""
        path = self.path / f"log.{start.session}.{start.roll}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            if os.fstat(fd).st_size < start.offset + len(data):
                return False
            written = os.pwrite(fd, data, start.offset)
            if written != len(data):
                return False
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self._walked = None  # walked again from its header: the repair may extend the end
        return True


class Inputs:
    """Every input directory of this node's ``in/``."""

    def __init__(
        self,
        in_dir: Path,
        sync: bool,
        held: Callable[[str], Position | None] | None = None,
        written: Callable[[str], Position | None] | None = None,
        ended: Callable[[str, tuple[int, int]], FileEnd | None] | None = None,
        known: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``known``: the inputs this node's push server writes (None: no push server in
        this process; the directory is listed, by one stat while unchanged, at each call)."""
        self.in_dir, self._sync, self._held, self._written = in_dir, sync, held, written
        self._ended, self._known = ended, known
        self._dirs: dict[str, InputDir] = {}
        self._listing = ListingCache(in_dir, _input_names)
        self._listed: tuple[float, frozenset[str]] | None = None  # (when, listing)

    @property
    def tracks_writes(self) -> bool:
        """Whether this node's push server says how far it has written each input."""
        return self._written is not None

    def get(self, name: str) -> InputDir:
        d = self._dirs.get(name)
        if d is None:
            d = self._dirs[name] = InputDir(
                self.in_dir / name, self._sync, self._held, self._written, self._ended
            )
        return d

    def names(self) -> list[str]:
        if self._known is None:
            return sorted(self._listing.get().union(self._dirs))
        listed, now = self._listed, time.monotonic()
        if listed is None or now - listed[0] >= INPUT_LISTING_EVERY_S:
            listed = self._listed = (now, self._listing.get())
        return sorted(listed[1].union(self._dirs, self._known()))

    def extents(self) -> dict[str, int]:
        return {name: int(self.get(name).extent()) for name in self.names()}

    def file_ends(self, merged: dict[str, int]) -> dict[str, list[int]]:
        """:meth:`InputDir.file_ends` of each input from its merged position (``merged``:
        input -> position), for the inputs with files after the one holding it."""
        ends = {}
        for name, position in merged.items():
            found = self.get(name).file_ends(Position(position))
            if found:
                ends[name] = found
        return ends


def _input_names(in_dir: Path) -> frozenset[str]:
    try:
        return frozenset(n for n in os.listdir(in_dir) if parse_publisher_dir(n) is not None)
    except FileNotFoundError:
        return frozenset()


def _header_bytes(path: Path) -> int | None:
    try:
        with open(path, "rb") as f:
            header = decode_file_header(f.read(MAX_FILE_HEADER_BYTES))
    except FileNotFoundError:
        return None
    return None if isinstance(header, str) else header.header_bytes


def _end_of(f: StreamFile) -> Position:
    try:
        return Position.of(f.session, f.roll, f.path.stat().st_size)
    except FileNotFoundError:
        return Position(0)


def whole_records(start: Position, buf: bytes) -> Records | None:
    """The whole, CRC-checked records at the head of ``buf`` (bytes of an input file
    from ``start``); None if not even one is whole."""
    found = scan(buf, 0, UNBOUNDED_SCAN_RECORDS, payloads=False)
    if not found.offsets:
        return None
    return Records(
        start,
        start.with_offset(start.offset + found.stop_offset),
        buf[: found.stop_offset],
        found.ids,
        found.offsets,
        found.timestamps_ns[0],
    )


def first_record_bytes(buf: bytes) -> int:
    """The size of the record ``buf`` starts with, as its header says (header included)."""
    length = int.from_bytes(buf[4:8], "little") if len(buf) >= 8 else 0
    return RECORD_HEADER.size + length
