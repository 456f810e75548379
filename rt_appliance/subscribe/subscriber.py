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

With ``pull=`` (the stream's configuration) and ``host=`` (this subscriber host) the
Subscriber keeps the host's copy of the merged log itself, as ``rt pull-client`` does,
from a thread of the application (:mod:`rt_appliance.subscribe.puller`); a follower is
woken by each chunk that arrives rather than by inotify. :meth:`close` stops it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rt_appliance.errors import LogError, UsageError
from rt_appliance.limits import DEFAULT_BATCH_MESSAGES, FOLLOW_POLL_S, MAX_BATCH_MESSAGES
from rt_appliance.log.cursor import LogCursor
from rt_appliance.log.recovery import verify_file
from rt_appliance.log.segments import list_files
from rt_appliance.log.watch import DirectoryWatcher, wait_for_directory
from rt_appliance.position import Position
from rt_appliance.subscribe.messages import Message, MessageBatch

if TYPE_CHECKING:
    from rt_appliance.config import StreamConfig
    from rt_appliance.subscribe.puller import Puller

__all__ = ["Subscriber"]


class Subscriber:
    """Reads messages from ``directory``, a stream file directory."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        pull: str | os.PathLike[str] | StreamConfig | None = None,
        host: str | None = None,
    ) -> None:
        """``pull``: the stream's configuration (``/etc/rt/rt.yaml`` or a loaded one);
        the Subscriber then keeps subscriber host ``host``'s copy (default: this
        machine's short host name) and ``directory`` may be left out."""
        self._puller: Puller | None = None
        if pull is None:
            if directory is None:
                raise UsageError("Subscriber needs a directory, or pull= and host=")
            self.directory = Path(directory)
            return
        from rt_appliance.config import as_config
        from rt_appliance.subscribe.puller import Puller

        config = as_config(pull)
        name = host or socket.gethostname().split(".")[0]
        self._puller = Puller(config, name, None if directory is None else Path(directory))
        self.directory = self._puller.directory

    def close(self) -> None:
        """Stop the pull client (``pull=``); the copy stays for the next start. Idempotent."""
        if self._puller is not None:
            self._puller.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
        waiter = DirectoryWatcher if self._puller is None else self._puller.arrivals.waiter
        with waiter(self.directory) as watcher:
            while follow and start == 0 and not list_files(self.directory):
                watcher.wait(FOLLOW_POLL_S)
            with LogCursor(self.directory, start, strict_tail=not follow) as cursor:
                while True:
                    block = cursor.next_block(max_messages)
                    if block is None:
                        if not follow:
                            return
                        watcher.wait(FOLLOW_POLL_S)
                        continue
                    if wanted is None or block.topic in wanted:
                        r, base = block.records, cursor.file_base
                        yield MessageBatch(
                            block.topic,
                            block.host,
                            r.payloads,
                            r.timestamps_ns,
                            r.ids,
                            r.offsets,
                            base,
                            Position(base | r.stop_offset),
                        )

    def end_position(self) -> Position:
        """The position just after the last valid record (where a new one would go)."""
        files = list_files(self.directory)
        if not files:
            return Position.ZERO
        report = verify_file(files[-1].path)
        return Position.of(files[-1].session, files[-1].roll, report.valid_bytes)
