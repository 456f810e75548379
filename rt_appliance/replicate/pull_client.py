"""The pull client (``rt pull-client``): a subscriber host's copy of the merged log.

The copy lives in ``<data_dir>/sub/<stream>`` and is always a byte-identical
prefix of every node's merged log: it is appended to only through
:class:`ReplicaDir`, which takes a chunk only where the copy ends. The client
connects to one node at a time, asks for METADATA (the topology) and sends
``PULL {position: where the copy ends}``; the node streams DATA from there. On
any failure it waits (capped, jittered backoff) and tries the next node with the
same position: merged logs are identical, so nothing is lost or repeated. A node
that failed is tried after the others for ``limits.AVOID_AFTER_FAILURE_S``, so a node
that keeps sending clients away (its sequencer silent) is not the next choice again.

PRUNE ``{before}`` says the node deleted the files before that position; the
client deletes its own copies of them (never the file it appends to) unless the
subscriber host has ``keep_pruned: true``. If every node answers that the copy's
end was pruned, the copy cannot continue without a gap: the client stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge

from rt_appliance import trace
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import (
    CorruptLogError,
    FrameError,
    LogError,
    PeerRejectedError,
    PositionPrunedError,
    RTError,
    TransportError,
)
from rt_appliance.limits import AVOID_AFTER_FAILURE_S, HANDSHAKE_TIMEOUT_S, INLINE_READ_BYTES
from rt_appliance.log.segments import fsync_dir, list_files
from rt_appliance.position import Position
from rt_appliance.replicate.backoff import Backoff
from rt_appliance.replicate.sink import DAMAGED_DIR, ReplicaDir
from rt_appliance.replicate.topology import (
    Endpoint,
    candidate_order,
    endpoints,
    parse_topology,
    replica_dir,
)
from rt_appliance.transport.listen import set_keepalive
from rt_appliance.transport.messages import FrameType, decode_control, decode_data, require
from rt_appliance.transport.session import Connection, connect, finish_in_thread
from rt_appliance.transport.tls import client_context

__all__ = ["ClientMetrics", "PullClient"]

log = logging.getLogger(__name__)


class ClientMetrics:
    """The pull client's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.received_bytes = Counter("rt_pull_client_received_bytes", "Bytes copied", registry=r)
        self.reconnects = Counter("rt_pull_client_reconnects", "Failed connections", registry=r)
        self.rejected = Counter(
            "rt_pull_client_rejected", "Connections a node refused (identity, role)", registry=r
        )
        self.pruned_files = Counter("rt_pull_client_pruned_files", "Files deleted", registry=r)
        self.connected = Gauge(
            "rt_pull_client_connected", "1 while pulling, per node", ["node"], registry=r
        )


class _Skip(Exception):
    """The node answered but is not the kind the subscriber prefers: try the next one."""


class PullClient:
    """Keeps ``replica_dir(config, subscriber)`` up to date until cancelled."""

    def __init__(self, config: StreamConfig, subscriber: str, metrics: ClientMetrics) -> None:
        self.config = config
        self.host = config.subscriber(subscriber)
        self.metrics = metrics
        self._context = client_context(config.tls, subscriber)
        self._fsync = config.replication.fsync != "never"
        self.directory = replica_dir(config, self.host)
        self.replica = ReplicaDir(self.directory, fsync=self._fsync)
        if self.replica.repaired is not None:
            log.error(
                "%s: the copy was damaged (%s): kept a copy in %s and cut it there; "
                "pulling the rest again",
                self.directory,
                self.replica.repaired,
                DAMAGED_DIR,
            )
        if self.replica.recovery is not None:
            log.warning("%s: recovered the copy: %s", self.directory, self.replica.recovery)
        self._order = candidate_order(endpoints(config), self.host.name, None, self.host.prefer)
        self._index = 0
        self._pruned_answers = 0  # nodes in a row that said our position was pruned
        self._failures = 0  # failed connections since the last PULL
        self._avoid: dict[str, float] = {}  # node -> until when (monotonic) it is tried last
        self._pulling_from: str | None = None
        self.on_change: Callable[[], None] | None = None  # after each append or prune
        self._unsynced = asyncio.Event()  # chunks were written since the last sync began
        self._sync_failure: LogError | None = None  # a sync failed and cut the copy back
        self._conn: Connection | None = None  # the connection pulled from, if any
        self.ready = asyncio.Event()  # set once the first connection attempt is made

    def status_line(self) -> str:
        """One line for systemd's status: where the copy comes from and where it ends."""
        source = f"pulling from {self._pulling_from}" if self._pulling_from else "connecting"
        return f"{source}; copy ends at {self.replica.end.format()}"

    async def run(self) -> None:
        """Pull until cancelled; reconnects and fails over by itself."""
        log.info("%s keeps %s from position %s", self.host.name, self.directory, self.replica.end)
        backoff = Backoff(
            self.config.replication.reconnect_initial_ms / 1000,
            self.config.replication.reconnect_max_ms / 1000,
        )
        syncer = asyncio.create_task(self._sync_loop(), name="copy-sync")
        try:
            skips = 0  # in a row: once every node was skipped, pause as after a failure
            while True:
                target = self._next_target()
                try:
                    await self._pull_from(target, backoff)
                except _Skip:
                    self._index += 1
                    skips += 1
                    if skips >= len(self._order):
                        skips = 0
                        await asyncio.sleep(backoff.next_delay())
                    continue
                except (RTError, TimeoutError) as exc:
                    skips = 0
                    self._failed(target, exc)
                    delay = backoff.next_delay()
                    nxt = self._next_target()
                    log.warning(
                        "%s: pull from %s failed (%s); trying %s in %.2fs",
                        self.host.name, target.name, exc, nxt.name, delay,
                    )  # fmt: skip
                    await asyncio.sleep(delay)
        finally:
            syncer.cancel()
            await asyncio.gather(syncer, return_exceptions=True)
            if self._fsync:
                with contextlib.suppress(OSError):  # a clean stop leaves the copy synced
                    self.replica.sync()
            self.replica.close()
            log.info("%s stopped; the copy ends at %s", self.host.name, self.replica.end)

    def _next_target(self) -> Endpoint:
        """The node at the current index, passing over nodes that failed recently.

        A node that just failed (its sequencer silent, say) may still rank first in
        the topology; going back to it at once would keep the client off the nodes
        that work. Once every node has failed recently, the order alone decides.
        """
        now = time.monotonic()
        count = len(self._order)
        for step in range(count):
            candidate = self._order[(self._index + step) % count]
            if self._avoid.get(candidate.name, 0.0) <= now:
                self._index += step
                return candidate
        return self._order[self._index % count]

    def _failed(self, target: Endpoint, exc: BaseException) -> None:
        self.metrics.reconnects.inc()
        self._index += 1
        self._failures += 1
        self._avoid[target.name] = time.monotonic() + AVOID_AFTER_FAILURE_S
        if isinstance(exc, PeerRejectedError):
            self.metrics.rejected.inc()
        if not isinstance(exc, PositionPrunedError):
            self._pruned_answers = 0
            return
        self._pruned_answers += 1
        if self._pruned_answers >= len(self._order):
            raise PositionPrunedError(
                f"{exc}; every node has pruned it, so {self.directory} cannot continue without "
                "a gap: move it away to start a new copy from the oldest available position"
            ) from exc

    async def _pull_from(self, target: Endpoint, backoff: Backoff) -> None:
        try:
            conn, node = await connect(
                target.host, target.port, self._context, self.config, self.host.name, "pull",
                target.name,
            )  # fmt: skip
        finally:
            self.ready.set()
        try:
            set_keepalive(conn.writer)
            await conn.send(FrameType.METADATA, {})
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                fields = await conn.receive_control(FrameType.TOPOLOGY)
            self._follow_topology(*parse_topology(fields, self.config), node)
            backoff.reset()
            self._failures = 0
            position = self.replica.end
            await conn.send(FrameType.PULL, {"position": int(position)})
            log.info(
                "%s: pulling from %s (%s:%d) at position %s (%r)",
                self.host.name, node, target.host, target.port, position.format(), position,
            )  # fmt: skip
            self.metrics.connected.labels(node).set(1)
            self._pulling_from, self._conn = node, conn
            while True:
                try:
                    frame = await conn.receive()
                except TransportError:
                    self._raise_sync_failure()  # the sync loop ended the connection
                    raise
                await self._on_frame(conn, *frame)
        finally:
            self._pulling_from = self._conn = None
            self.metrics.connected.labels(node).set(0)
            await conn.close()

    def _follow_topology(self, nodes: list[Endpoint], leader: str | None, node: str) -> None:
        """Take the node list and leader the topology names; skip ``node`` if it is not the
        preferred kind, unless every node of the other kind just failed."""
        order = candidate_order(nodes, self.host.name, leader, self.host.prefer)
        if order != self._order:
            log.info(
                "%s: nodes in order of preference: %s", self.host.name, [e.name for e in order]
            )
            self._order = order
        names = [e.name for e in order]
        self._index = names.index(node) if node in names else self._index
        if leader is None and self.host.prefer != "any":
            log.info(
                "%s: %s names no leader yet; taking it, whichever role it has",
                self.host.name, node,
            )  # fmt: skip
        preferred = (node == leader) == (self.host.prefer == "leader")
        now = time.monotonic()
        others = [e.name for e in order if e.name != node]
        others_failed = self._failures >= (
            1 if self.host.prefer == "leader" else len(order) - 1
        ) or all(self._avoid.get(name, 0.0) > now for name in others)
        if leader is not None and self.host.prefer != "any" and not preferred and not others_failed:
            raise _Skip(node)

    async def _on_frame(self, conn: Connection, frame_type: int, body: bytes) -> None:
        if frame_type == FrameType.DATA:
            data = decode_data(body)
            if data.dir != self.config.stream:
                raise FrameError(f"{conn.peer} sent DATA for {data.dir!r}")
            self._raise_sync_failure()
            if len(data.payload) < INLINE_READ_BYTES:  # the stream's tail: no thread hand-off
                self._append(data.position, data.payload)
            else:
                await finish_in_thread(partial(self._append, data.position, data.payload))
            trace.event("copy", self.host.name, int(self.replica.end))
            self.metrics.received_bytes.inc(len(data.payload))
            self._pruned_answers = 0
            if self.on_change is not None:
                self.on_change()
            if self._fsync:
                self._unsynced.set()
            return
        fields = decode_control(frame_type, body)
        if frame_type == FrameType.PRUNE:
            before = Position.parse(require(fields, "before", int))
            await finish_in_thread(partial(self._prune, before, conn.peer))
            if self.on_change is not None:
                self.on_change()
        elif frame_type == FrameType.ERROR:
            message = f"{conn.peer}: {fields.get('message', '?')}"
            if "oldest" in fields:
                raise PositionPrunedError(message)
            raise TransportError(message) if fields.get("retryable") else PeerRejectedError(message)
        elif frame_type != FrameType.TOPOLOGY:
            raise FrameError(f"{conn.peer} sent frame type {frame_type} while streaming")

    def _append(self, position: Position, payload: memoryview) -> None:
        """Append a chunk (synced later, by :meth:`_sync_loop`); after a failed write,
        reopen the copy so its end is what is on disk."""
        try:
            self.replica.append(position, payload, sync=False)
        except CorruptLogError:
            raise  # refused before anything was written
        except (LogError, OSError) as exc:
            self._reopen()
            if isinstance(exc, OSError):
                raise LogError(f"{self.directory}: cannot append: {exc.strerror}") from exc
            raise

    def _raise_sync_failure(self) -> None:
        """After a failed sync cut the copy back: end this pull, to go on from its end."""
        if self._sync_failure is not None:
            failure, self._sync_failure = self._sync_failure, None
            raise failure

    def _reopen(self) -> None:
        self.replica.close()
        self.replica = ReplicaDir(self.directory, fsync=self._fsync)

    async def _sync_loop(self) -> None:
        """Sync the copy after its chunks were delivered (group commit): a sync starts as
        soon as a chunk was written and none is running, and covers every chunk before
        it. The copy is a cache of the nodes' merged log: what a crash takes from its
        tail is pulled again, the same bytes at the same positions. A failed sync cuts
        the copy back to the last good one, and the pull goes on from there."""
        while True:
            await self._unsynced.wait()
            self._unsynced.clear()
            replica = self.replica
            try:
                fd, end = replica.sync_handle()
            except OSError:
                continue  # no file open (the copy was just reopened): nothing to sync
            try:
                await finish_in_thread(partial(os.fdatasync, fd))
            except OSError as exc:
                if replica is self.replica:
                    log.error("%s: syncing the copy failed: %s", self.directory, exc)
                    try:
                        replica.cut_unsynced(exc)
                    except LogError as cut:
                        self._sync_failure = cut
                    self._reopen()
                    if self._conn is not None:  # the pull goes on from the copy's new end
                        self._conn.writer.transport.abort()
                continue
            finally:
                os.close(fd)
            replica.mark_synced(end)

    def _prune(self, before: Position, node: str) -> None:
        """Delete the copy's files older than ``before`` (never the one being appended to)."""
        end = self.replica.end
        doomed = [
            f for f in list_files(self.directory) if f.key < min(before.file_key, end.file_key)
        ]
        if not doomed:
            return
        if self.host.keep_pruned:
            log.info(
                "%s: %s pruned before %s; keeping %d files (keep_pruned)",
                self.host.name,
                node,
                before,
                len(doomed),
            )
            return
        for f in doomed:
            with contextlib.suppress(FileNotFoundError):
                f.path.unlink()
            log.info("%s: deleted %s (pruned on %s)", self.host.name, f.path, node)
        fsync_dir(self.directory)
        self.metrics.pruned_files.inc(len(doomed))
