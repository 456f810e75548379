"""The Publisher: appends messages to a local stream file directory, with no networking.

A publisher writes ``<directory>/<topic>.<host>/log.X.Y``. Every start is a new
session. Durability is explicit (:class:`Durability`); the disk is the buffer while
the network is down, bounded by ``max_bytes`` (:mod:`rt_appliance.publish.budget`).

A Publisher is safe to share between threads: calls are serialised by a lock.

With ``replicate=`` (the stream's configuration file) the Publisher also sends its
directory to every node itself, from a thread of the application
(:mod:`rt_appliance.publish.replicator`): no ``rt push-client`` is needed for it, and
each ``publish()`` wakes the sender directly.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from enum import Enum, StrEnum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from rt_appliance.clock import wall_ns
from rt_appliance.errors import DedupIdError, LogError, UsageError
from rt_appliance.limits import (
    DEFAULT_FSYNC_BATCH_MESSAGES,
    DEFAULT_FSYNC_INTERVAL_MS,
    DEFAULT_ROLL_BYTES,
    MAX_FSYNC_INTERVAL_MS,
)
from rt_appliance.log.format import FILE_KIND_PUBLISHER, encode_batch, encode_record
from rt_appliance.log.naming import is_dedup_topic, publisher_dir_name
from rt_appliance.log.recovery import TruncationReport
from rt_appliance.log.writer import LogWriter
from rt_appliance.payloads import encode_arrow
from rt_appliance.position import Position
from rt_appliance.publish.budget import DiskBudget, Drops, OnFull, check_budget

if TYPE_CHECKING:
    from rt_appliance.config import StreamConfig
    from rt_appliance.publish.replicator import Replicator

__all__ = ["Durability", "OnFull", "Publisher"]

log = logging.getLogger(__name__)
_E = TypeVar("_E", bound=Enum)


class Durability(StrEnum):
    """When appended messages are made durable (``fdatasync``).

    * ``always``: every ``publish``/``publish_batch`` call is durable when it returns;
    * ``batch``: every ``publish_batch`` call is durable when it returns; single
      ``publish`` calls are synced every ``fsync_batch_messages`` messages;
    * ``interval``: a background thread syncs every ``fsync_interval_ms``;
    * ``never``: only ``flush()`` syncs; the operating system decides otherwise.

    In every mode data is written to the file (visible to readers on this host)
    before the call returns, and ``flush()`` makes everything durable.

    A Publisher that replicates wakes its sender as soon as the bytes are written,
    before their sync: they are on their way to the nodes while the disk syncs them. A
    host that fails during that sync may leave a node holding messages whose call never
    returned, as a host that fails after the write does with ``interval`` or ``never``.
    """

    ALWAYS = "always"
    BATCH = "batch"
    INTERVAL = "interval"
    NEVER = "never"


class Publisher:
    """Appends messages to ``<directory>/<topic>.<host>/``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        topic: str,
        host: str | None = None,
        *,
        fsync: Durability | str = Durability.BATCH,
        fsync_interval_ms: int = DEFAULT_FSYNC_INTERVAL_MS,
        fsync_batch_messages: int = DEFAULT_FSYNC_BATCH_MESSAGES,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
        max_bytes: int | None = None,
        on_full: OnFull | str = OnFull.BLOCK,
        block_timeout_s: float | None = None,
        replicate: str | os.PathLike[str] | StreamConfig | None = None,
    ) -> None:
        """``replicate``: the stream's configuration (``/etc/rt/rt.yaml``, or a loaded
        one); ``host`` is then this publisher host's name in it and ``directory`` its
        ``data_dir``/pub. Raises :class:`SenderLockedError` if another process (an
        ``rt push-client``) already sends the directory."""
        self.topic = topic
        self.host = host or socket.gethostname().split(".")[0]
        self.directory = Path(directory) / publisher_dir_name(topic, self.host)
        self.durability = _enum(Durability, fsync, "fsync")
        if not 1 <= fsync_interval_ms <= MAX_FSYNC_INTERVAL_MS:
            raise UsageError(f"fsync_interval_ms must be 1..{MAX_FSYNC_INTERVAL_MS}")
        if fsync_batch_messages < 1:
            raise UsageError("fsync_batch_messages must be at least 1")
        self._sync_every = fsync_batch_messages
        self._dedup = is_dedup_topic(topic)
        self._last_id: int | None = None
        self._unsynced = 0
        self._lock = threading.Lock()
        policy = _enum(OnFull, on_full, "on_full")
        if max_bytes is not None:
            check_budget(max_bytes, roll_bytes, block_timeout_s)
        self._writer = LogWriter(
            self.directory,
            kind=FILE_KIND_PUBLISHER,
            topic=topic,
            host=self.host,
            roll_bytes=roll_bytes,
            sync_on_roll=self.durability is not Durability.NEVER,
        )
        if self._writer.recovery is not None:
            _log_recovery(self._writer.recovery)
        self._budget: DiskBudget | None = None
        if max_bytes is not None:
            try:
                self._budget = DiskBudget(
                    self.directory, max_bytes, policy, roll_bytes, block_timeout_s
                )
            except BaseException:
                self._writer.close()
                raise
        self._closed = threading.Event()
        self._is_closed = False  # mirrors _closed; a plain bool is cheaper on the hot path
        self._sync_singles = self.durability is not Durability.NEVER
        self._syncer: threading.Thread | None = None
        if self.durability is Durability.INTERVAL:
            self._syncer = threading.Thread(
                target=self._sync_loop,
                args=(fsync_interval_ms / 1000,),
                daemon=True,
                name=f"rt-publisher-sync-{topic}",
            )
            self._syncer.start()
        self._replicator: Replicator | None = None
        self._notify = _no_notify
        if replicate is not None:
            try:
                self._replicator = _replicator(replicate, self.host, topic, self.directory)
            except BaseException:
                self.close()
                raise
            self._notify = self._replicator.notify
        log.info("publishing %s session %d", self.directory, self._writer.session)

    # -- the calls applications make ------------------------------------------------

    def publish(
        self, payload: bytes, *, timestamp_ns: int | None = None, id: int | None = None
    ) -> Position:
        """Append one message; returns its position."""
        if id is None and self._dedup:
            raise DedupIdError(f"topic {self.topic} is a .dedup topic: every message needs an id")
        record = encode_record(
            payload, wall_ns() if timestamp_ns is None else timestamp_ns, id or 0
        )
        with self._lock:
            if self._is_closed:
                self._raise_closed()
            if self._dedup:
                last_id = self._check_ids([id or 0])
            if self._budget is not None:
                writer = self._writer
                self._budget.admit(writer.bytes_needed([len(record)]), writer.current)
            position = self._writer.append_one(record)
            if self._dedup:
                self._last_id = last_id
            self._notify()  # before the sync: the sender reads the bytes while they sync
            if self._sync_singles:
                self._after_write(1, single=True)
        return position

    def publish_arrow(
        self, data: Any, *, timestamp_ns: int | None = None, id: int | None = None
    ) -> Position:
        """Append a pyarrow Table or RecordBatch, or a pandas DataFrame, as one message
        (an Arrow IPC stream: :mod:`rt_appliance.payloads`); returns its position.

        Subscribers read it back with ``message.arrow()``; the Spark source with
        ``codec=arrow`` gives its rows as typed columns.
        """
        return self.publish(encode_arrow(data), timestamp_ns=timestamp_ns, id=id)

    def publish_batch(
        self,
        payloads: Sequence[bytes],
        *,
        timestamp_ns: int | None = None,
        ids: Sequence[int] | None = None,
    ) -> Position:
        """Append messages in one write; returns the last one's position.

        All messages get ``timestamp_ns`` (default: the time of the call). On a
        ``.dedup`` topic ``ids`` is required and checked before anything is written.
        """
        if not payloads:
            return self.position
        if ids is not None and len(ids) != len(payloads):
            raise UsageError(f"{len(payloads)} payloads but {len(ids)} ids")
        if self._dedup and ids is None:
            raise DedupIdError(f"topic {self.topic} is a .dedup topic: every message needs an id")
        ts = wall_ns() if timestamp_ns is None else timestamp_ns
        data, sizes = encode_batch(list(payloads), ts, None if ids is None else list(ids))
        with self._lock:
            self._check_open()
            if self._dedup:
                last_id = self._check_ids(ids)  # type: ignore[arg-type]
            if self._budget is not None:
                self._budget.admit(self._writer.bytes_needed(sizes), self._writer.current)
            position = self._writer.append(data, sizes)
            if self._dedup:
                self._last_id = last_id
            self._notify()  # before the sync: the sender reads the bytes while they sync
            self._after_write(len(sizes), single=False)
        return position

    def flush(self) -> Position:
        """Make everything published so far durable; returns the position after it."""
        with self._lock:
            self._check_open()
            self._writer.sync()
            self._unsynced = 0
            return self._writer.position

    def close(self) -> None:
        """Sync (unless durability is ``never``), release the directory. Idempotent.

        A Publisher that replicates first waits up to a few seconds
        (``limits.PUBLISHER_CLOSE_LINGER_S``) for every node to acknowledge what it
        published; what is left is sent by the next sender of the directory.
        """
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._is_closed = True
            end = self._writer.position
            self._writer.close(sync=self.durability is not Durability.NEVER)
        if self._syncer is not None:
            self._syncer.join()
        if self._replicator is not None:
            self._replicator.close(end)

    def wait_acknowledged(
        self, position: Position | None = None, *, nodes: int | None = None, timeout_s: float = 10.0
    ) -> bool:
        """With ``replicate=``: wait until ``nodes`` nodes (default: all) acknowledged
        every message before ``position`` (default: everything published so far);
        False after ``timeout_s``. Acknowledged means synced in the node's copy."""
        if self._replicator is None:
            raise UsageError("wait_acknowledged() needs a Publisher made with replicate=")
        target = self.position if position is None else position
        count = len(self._replicator.client.acked) if nodes is None else nodes
        return self._replicator.wait(target, count, timeout_s)

    @property
    def acknowledged(self) -> dict[str, Position]:
        """With ``replicate=``: how far each node has acknowledged this directory."""
        if self._replicator is None:
            raise UsageError("acknowledged needs a Publisher made with replicate=")
        return self._replicator.acknowledged()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- state --------------------------------------------------------------------------

    @property
    def position(self) -> Position:
        """Where the next message will be written."""
        return self._writer.position

    @property
    def session(self) -> int:
        return self._writer.session

    @property
    def recovery(self) -> TruncationReport | None:
        """What this start cut from a torn tail left by the previous writer, if anything."""
        return self._writer.recovery

    @property
    def drops(self) -> Drops:
        """Files, records and bytes dropped by ``on_full=drop_oldest``."""
        return self._budget.drops if self._budget is not None else Drops()

    # -- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._is_closed:
            self._raise_closed()

    def _raise_closed(self) -> None:
        raise LogError(f"publisher for {self.directory} is closed")

    def _check_ids(self, ids: Sequence[int]) -> int:
        """Check KX's dedup rule (abs(id) advances by one) for ``ids``; returns the last.

        The caller adopts the last id only once the messages are written.
        """
        previous = self._last_id
        for i, current in enumerate(ids):
            if previous is not None and abs(current) != abs(previous) + 1:
                raise DedupIdError(
                    f"topic {self.topic}: message {i} has id {current} after id {previous}; "
                    "on a .dedup topic abs(id) must advance by one; nothing was written"
                )
            previous = current
        return ids[-1]

    def _after_write(self, count: int, single: bool) -> None:
        mode = self.durability
        if mode is Durability.ALWAYS or (mode is Durability.BATCH and not single):
            self._writer.sync()
            self._unsynced = 0
        elif mode is Durability.BATCH:
            self._unsynced += count
            if self._unsynced >= self._sync_every:
                self._writer.sync()
                self._unsynced = 0
        elif mode is Durability.INTERVAL:
            self._unsynced += count

    def _sync_loop(self, interval_s: float) -> None:
        while not self._closed.wait(interval_s):
            with self._lock:
                if self._closed.is_set() or not self._unsynced:
                    continue
                fd = self._writer.dup_fd()
                pending, self._unsynced = self._unsynced, 0
            try:
                os.fdatasync(fd)  # outside the lock: publishers keep appending meanwhile
            except OSError as exc:  # keep trying; the data is not durable yet
                log.error("%s: background sync failed: %s", self.directory, exc.strerror)
                with self._lock:
                    self._unsynced += pending
            finally:
                os.close(fd)


def _no_notify() -> None:
    """A Publisher that does not replicate has no sender to wake."""


def _replicator(
    replicate: str | os.PathLike[str] | StreamConfig, host: str, topic: str, directory: Path
) -> Replicator:
    from rt_appliance.config import as_config
    from rt_appliance.publish.replicator import Replicator

    return Replicator(as_config(replicate), host, topic, directory)


def _enum(kind: type[_E], value: object, name: str) -> _E:
    try:
        return kind(value)
    except ValueError:
        choices = " | ".join(m.value for m in kind)
        raise UsageError(f"{name} must be one of {choices}, got {value!r}") from None


def _log_recovery(report: TruncationReport) -> None:
    log.warning(
        "%s: previous writer left a torn tail at offset %d (%s): cut %d bytes, %d records%s",
        report.path,
        report.offset,
        report.reason,
        report.lost_bytes,
        report.lost_records,
        " (file removed)" if report.removed_file else "",
    )
