"""A cursor over a stream file directory: blocks of records from a position on, across files.

The Subscriber (messages) and the replicators (raw bytes) both read through it.
It walks files in (session, roll) order. At the end of a file's valid records it
looks for a later file; only when one exists does it read the rest of the current
file once more and move on, so bytes appended just before a roll are never
skipped, and a file followed by a later one must end cleanly.
"""

from __future__ import annotations

import os
from pathlib import Path

from rt_appliance.clock import wall_ns
from rt_appliance.errors import CorruptLogError, InvalidPositionError, PositionPrunedError
from rt_appliance.limits import MTIME_SLACK_NS, OFFSET_BITS, RECORD_PROBE_BYTES, ROLL_BITS
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.reader import Block, FileReader
from rt_appliance.log.scan import check_record
from rt_appliance.log.segments import StreamFile, last_session, list_files
from rt_appliance.position import Position

__all__ = ["LogCursor", "check_offset", "locate", "next_file"]

_SESSION_SHIFT = OFFSET_BITS + ROLL_BITS


class LogCursor:
    """Reads blocks from ``directory`` starting at ``position`` (0: the start).

    Raises :class:`PositionPrunedError` for a position whose file was deleted and
    :class:`InvalidPositionError` for one that is not a record boundary of the log.
    ``strict_tail`` (for a reader that will not wait) treats a record running
    past the end of the last file as the torn tail it then is. A whole record larger
    than ``max_record_bytes`` stops the cursor where it starts (None, with the
    reader's tail "large") until the caller moves the reader past it.
    """

    def __init__(
        self,
        directory: Path,
        position: Position,
        strict_tail: bool = False,
        max_record_bytes: int | None = None,
    ) -> None:
        self.directory = directory
        self._strict_tail = strict_tail
        self._max_record_bytes = max_record_bytes
        self.file: StreamFile | None = None
        self.reader: FileReader | None = None
        self._listed_mtime, self._listed_at = -2, 0  # the directory's mtime at the last listing
        located = locate(directory, position)
        if located is not None:
            self._open(*located)

    @property
    def file_base(self) -> int:
        """The position of offset 0 of the current file (0 before the first file exists)."""
        f = self.file
        return 0 if f is None else (f.session << _SESSION_SHIFT) | (f.roll << OFFSET_BITS)

    @property
    def position(self) -> Position:
        """Where the next block starts."""
        if self.reader is None:
            return Position.ZERO
        return Position(self.file_base | self.reader.offset)

    def next_block(
        self, limit: int, decode: bool = True, verify: bool = True, columns: bool = False
    ) -> Block | None:
        """The next block of up to ``limit`` records, or None when caught up for now.

        ``columns``: the records as packed columns (see :meth:`FileReader.read_block`).
        """
        if self.reader is None:
            files = list_files(self.directory)
            if not files:
                return None
            self._open(files[0], 0)
        while True:
            assert self.reader is not None and self.file is not None
            block = self.reader.read_block(limit, decode, verify, columns)
            if block is not None or self.at_large_record:
                return block
            later = self._later_file()
            if later is None:
                return None
            block = self.reader.read_block(limit, decode, verify, columns)  # just before the roll
            if block is not None or self.at_large_record:
                return block
            self._check_clean_end(later)
            self._open(later, 0)

    def skip(self, position: Position, end: Position) -> bool:
        """Go on at ``end`` of the current merged file, from ``position`` where reading
        stands, without reading what lies between (:meth:`FileReader.skip_to`)."""
        if self.reader is None or self.position != position or end.file_key != position.file_key:
            return False
        return self.reader.skip_to(end.offset)

    @property
    def at_large_record(self) -> bool:
        """Whether reading stopped at a whole record larger than ``max_record_bytes``."""
        tail = None if self.reader is None else self.reader.tail
        return tail is not None and tail.kind == "large"

    def _later_file(self) -> StreamFile | None:
        """:func:`next_file`, skipping the directory listing while the directory is unchanged.

        A follower asks at every wake-up, thousands of times a second. A directory's
        mtime moves when a file is created, renamed or deleted, but only in coarse
        clock ticks, so the cached answer is trusted only for an mtime well older
        than the listing that produced it.
        """
        assert self.file is not None
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except FileNotFoundError:
            mtime = -1
        if mtime == self._listed_mtime and mtime < self._listed_at - MTIME_SLACK_NS:
            return None
        listed_at = wall_ns()
        later = next_file(self.directory, self.file)
        if later is None:
            self._listed_mtime, self._listed_at = mtime, listed_at
        return later

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None

    def __enter__(self) -> LogCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, f: StreamFile, offset: int) -> None:
        self.close()
        try:
            self.reader = FileReader(f.path, offset, strict_tail=self._strict_tail)
            self.reader.max_record_bytes = self._max_record_bytes
        except FileNotFoundError:
            raise PositionPrunedError(
                f"{self.directory}: {f.path.name} was pruned while reading"
            ) from None
        self.file = f

    def _check_clean_end(self, later: StreamFile) -> None:
        """A file followed by a later one must end cleanly: a writer repairs before moving on.

        Nor may it have become shorter than where this cursor has read to (cut by a fault
        while it was read): moving on to the next file would skip what was cut."""
        assert self.reader is not None and self.file is not None
        size = self.reader.size()
        if size < self.reader.offset:
            raise CorruptLogError(
                str(self.file.path),
                size,
                f"the file is {size} bytes, shorter than offset {self.reader.offset} "
                f"already read, and is followed by {later.path.name}",
            )
        tail = self.reader.tail
        if tail is not None and tail.kind != "clean":
            raise CorruptLogError(
                str(self.file.path),
                tail.offset,
                f"{tail.kind} tail ({tail.reason}) in a file followed by {later.path.name}",
            )


def locate(directory: Path, position: Position) -> tuple[StreamFile, int] | None:
    """The file and offset to start reading ``position`` at; None: no file yet (position 0)."""
    if position != 0 and position.session == 0:
        raise InvalidPositionError(
            f"{position.format()} is not a position: sessions are numbered from 1"
        )
    files = list_files(directory)
    if not files:
        if position == 0:
            return None
        if 0 < position.session <= last_session(directory):
            raise PositionPrunedError(
                f"{directory}: position {position.format()} ({position!r}) was pruned; "
                "no stream files are left"
            )
        raise InvalidPositionError(
            f"{directory}: no stream files; cannot read from {position.format()}"
        )
    if position == 0:
        return files[0], 0
    for f in files:
        if f.key == position.file_key:
            check_offset(f, position.offset)
            return f, position.offset
    if position.file_key < files[0].key:
        oldest = Position.of(files[0].session, files[0].roll, 0)
        raise PositionPrunedError(
            f"{directory}: position {position.format()} ({position!r}) was pruned; "
            f"the oldest available is {oldest.format()} ({oldest!r})"
        )
    raise InvalidPositionError(
        f"{directory}: no file for position {position.format()} ({position!r})"
    )


def next_file(directory: Path, current: StreamFile) -> StreamFile | None:
    """The file after ``current``; a skipped roll means files were pruned under us."""
    for f in list_files(directory):
        if f.key > current.key:
            if f.session == current.session and f.roll != current.roll + 1:
                raise PositionPrunedError(
                    f"{directory}: files after {current.path.name} were pruned while reading"
                )
            if f.session != current.session and f.roll != 0:
                raise PositionPrunedError(
                    f"{directory}: files before {f.path.name} were pruned while reading"
                )
            return f
    return None


def check_offset(f: StreamFile, offset: int) -> None:
    """A resume offset must be 0, the end of the file's valid data, or a record's start.

    A valid record at ``offset`` proves it; otherwise (the record there is still
    being written, or ``offset`` is no boundary) the file's records are walked.
    """
    if offset == 0:
        return
    with FileReader(f.path) as reader:
        header_bytes, size = reader.header.header_bytes, reader.size()
        if offset in (header_bytes, size):
            return
        if offset < header_bytes or offset > size:
            raise InvalidPositionError(f"{f.path}: offset {offset} is outside the file")
        if check_record(reader.pread(RECORD_HEADER.size + RECORD_PROBE_BYTES, offset), 0)[2] == "":
            return
        while (block := reader.read_block(decode=False)) is not None:
            records = block.records
            if records.stop_offset >= offset:
                if offset == records.stop_offset or offset in records.offsets:
                    return
                break
    raise InvalidPositionError(f"{f.path}: offset {offset} is not the start of a record")
