"""The Subscriber: reads a stream file directory from a position, optionally following it.

It reads a publisher log (``pub/<topic>.<host>``), a node's replica (``in/...``)
or the merged log (``merged/``) with the same code: each file's header says
which, and merged-log range records name each message's source.

Reading walks files in (session, roll) order. At the end of a file's valid
records it looks for a later file; only when one exists does it read the rest of
the current file once more and move on, so bytes appended just before a roll are
never skipped. With ``follow=True`` it then waits on inotify for more.

A damaged record followed by valid ones is a :class:`CorruptLogError` naming the
file and offset. Without ``follow`` a record running past the end of the last
file is checked for valid records hidden after it too (its length may be the
damaged part); a follower waits instead, since the writer may be writing it.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Generator, Iterator
from pathlib import Path

from rt_appliance.errors import CorruptLogError, InvalidPositionError, LogError, PositionPrunedError
from rt_appliance.limits import (
    DEFAULT_BATCH_MESSAGES,
    FOLLOW_POLL_S,
    MAX_BATCH_MESSAGES,
    OFFSET_BITS,
    ROLL_BITS,
)
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.reader import FileReader
from rt_appliance.log.recovery import verify_file
from rt_appliance.log.scan import check_record
from rt_appliance.log.segments import StreamFile, last_session, list_files
from rt_appliance.log.watch import DirectoryWatcher, wait_for_directory
from rt_appliance.position import Position
from rt_appliance.subscribe.messages import Message, MessageBatch

__all__ = ["Subscriber"]

_SESSION_SHIFT = OFFSET_BITS + ROLL_BITS


class Subscriber:
    """Reads messages from ``directory``, a stream file directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    # -- the calls applications make ------------------------------------------------

    def read(
        self,
        position: Position | int = 0,
        follow: bool = False,
        topics: Collection[str] | None = None,
    ) -> Iterator[Message]:
        """Messages from ``position`` (0: the start) on; see :meth:`read_batches`."""
        for batch in self.read_batches(position, follow, topics):
            yield from batch

    def read_batches(
        self,
        position: Position | int = 0,
        follow: bool = False,
        topics: Collection[str] | None = None,
        max_messages: int = DEFAULT_BATCH_MESSAGES,
    ) -> Iterator[MessageBatch]:
        """Batches of up to ``max_messages`` messages from ``position`` on.

        Without ``follow`` it stops at the end of the valid log; with it, it waits
        for new messages (inotify) across rolls and sessions. ``topics`` keeps
        only messages of those topics. Raises :class:`PositionPrunedError` for a
        position whose file was deleted and :class:`InvalidPositionError` for one
        that is not a record boundary of this log.
        """
        max_messages = max(1, min(max_messages, MAX_BATCH_MESSAGES))
        wanted = None if topics is None else frozenset(topics)
        start = Position.parse(position)
        if not self.directory.is_dir():
            if not follow:
                raise LogError(f"{self.directory}: no such stream directory")
            while not wait_for_directory(self.directory, FOLLOW_POLL_S):
                pass
        with DirectoryWatcher(self.directory) as watcher:
            current, offset = self._locate(start, follow, watcher)
            if current is _NO_FILE:
                return
            while True:
                try:
                    reader = FileReader(current.path, offset, strict_tail=not follow)
                except FileNotFoundError:
                    raise PositionPrunedError(
                        f"{self.directory}: {current.path.name} was pruned while reading"
                    ) from None
                try:
                    later = yield from self._read_file(
                        current, reader, follow, wanted, max_messages, watcher
                    )
                finally:
                    reader.close()
                if later is None:
                    return
                current, offset = later, 0

    def end_position(self) -> Position:
        """The position just after the last valid record (where a new one would go)."""
        files = list_files(self.directory)
        if not files:
            return Position.ZERO
        report = verify_file(files[-1].path)
        return Position.of(files[-1].session, files[-1].roll, report.valid_bytes)

    # -- internals ----------------------------------------------------------------------

    def _locate(
        self, position: Position, follow: bool, watcher: DirectoryWatcher
    ) -> tuple[StreamFile, int]:
        """The file and offset to start reading ``position`` at."""
        if position != 0 and position.session == 0:
            raise InvalidPositionError(
                f"{position.format()} is not a position: sessions are numbered from 1"
            )
        files = list_files(self.directory)
        while not files and position == 0 and follow:
            watcher.wait(FOLLOW_POLL_S)
            files = list_files(self.directory)
        if not files:
            if position == 0:
                return _NO_FILE, 0
            if 0 < position.session <= last_session(self.directory):
                raise PositionPrunedError(
                    f"{self.directory}: position {position.format()} ({position!r}) was pruned; "
                    "no stream files are left"
                )
            raise InvalidPositionError(
                f"{self.directory}: no stream files; cannot read from {position.format()}"
            )
        if position == 0:
            return files[0], 0
        for f in files:
            if f.key == position.file_key:
                _check_offset(f, position.offset)
                return f, position.offset
        if position.file_key < files[0].key:
            oldest = Position.of(files[0].session, files[0].roll, 0)
            raise PositionPrunedError(
                f"{self.directory}: position {position.format()} ({position!r}) was pruned; "
                f"the oldest available is {oldest.format()} ({oldest!r})"
            )
        raise InvalidPositionError(
            f"{self.directory}: no file for position {position.format()} ({position!r})"
        )

    def _read_file(
        self,
        current: StreamFile,
        reader: FileReader,
        follow: bool,
        wanted: frozenset[str] | None,
        max_messages: int,
        watcher: DirectoryWatcher,
    ) -> Generator[MessageBatch, None, StreamFile | None]:
        """Yield the batches of one file; return the next file, or None to stop."""
        base = (current.session << _SESSION_SHIFT) | (current.roll << OFFSET_BITS)
        while True:
            block = reader.read_block(max_messages)
            if block is None:
                later = _next_file(self.directory, current)
                if later is not None:
                    block = reader.read_block(max_messages)  # bytes written just before the roll
                    if block is None:
                        _check_tail_before(reader, current, later)
                        return later
                elif not follow:
                    return None
                else:
                    watcher.wait(FOLLOW_POLL_S)
                    continue
            if wanted is None or block.topic in wanted:
                r = block.records
                yield MessageBatch(
                    block.topic, block.host, r.payloads, r.timestamps_ns, r.ids, r.offsets,
                    base, Position(base | r.stop_offset),
                )


def _check_tail_before(reader: FileReader, current: StreamFile, later: StreamFile) -> None:
    """A file followed by a later one must end cleanly: a writer repairs before moving on."""
    tail = reader.tail
    if tail is not None and tail.kind != "clean":
        raise CorruptLogError(
            str(current.path), tail.offset,
            f"{tail.kind} tail ({tail.reason}) in a file followed by {later.path.name}",
        )


_NO_FILE = StreamFile(0, 0, Path("/nonexistent"))


def _next_file(directory: Path, current: StreamFile) -> StreamFile | None:
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


def _check_offset(f: StreamFile, offset: int) -> None:
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
        if check_record(reader.pread(RECORD_HEADER.size + (1 << 16), offset), 0)[2] == "":
            return
        while (block := reader.read_block(decode=False)) is not None:
            records = block.records
            if records.stop_offset >= offset:
                if offset == records.stop_offset or offset in records.offsets:
                    return
                break
    raise InvalidPositionError(f"{f.path}: offset {offset} is not the start of a record")
