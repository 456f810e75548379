"""The push client: streams a publisher host's directories to every RT node.

One per publisher host (``rt push-client``), or one inside an application's own
Publisher (``Publisher(..., replicate=...)``). It holds one connection to each
node: directly, or through the load balancer, where the WELCOME names the node
that answered and a connection to a node it already holds is closed and retried
(RabbitMQ's workaround). On each connection it offers its directories, resumes
where the node says, sends chunks as the publisher writes them (inotify), and
reconnects with capped, jittered backoff. Rolled files that every node has
acknowledged are deleted when ``replication.delete_acked`` is set.

One sender per directory: a push client holds ``<dir>/.send.lock`` (flock) for every
directory it sends. The daemon waits for a directory another process sends and takes
it over when that process stops; an application's Publisher refuses to start
(:class:`~rt_appliance.errors.SenderLockedError`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from rt_appliance import trace
from rt_appliance.config.model import NodeConfig, StreamConfig
from rt_appliance.errors import RTError, SenderLockedError, TransportError
from rt_appliance.limits import (
    FRAME_MARGIN_BYTES,
    LAG_UPDATE_S,
    PUSH_IDLE_WAIT_S,
    PUSH_LATER_S,
    PUSH_WINDOW_FRAMES,
    SENDER_LOCK_RETRY_S,
)
from rt_appliance.log.naming import publisher_dir_name
from rt_appliance.log.segments import DirectoryLock, bytes_after, fsync_dir, list_files
from rt_appliance.position import Position
from rt_appliance.replicate.backoff import Backoff
from rt_appliance.replicate.push_metrics import PushMetrics
from rt_appliance.replicate.refusals import Refusals, Stuck
from rt_appliance.replicate.source import DirectorySource
from rt_appliance.replicate.wake import WaiterFactory, watch_directories
from rt_appliance.transport.messages import FrameType, decode_control, require
from rt_appliance.transport.session import Connection, connect
from rt_appliance.transport.tls import client_context

__all__ = ["SEND_LOCK_NAME", "PushClient"]

SEND_LOCK_NAME = ".send.lock"

log = logging.getLogger(__name__)


class PushClient:
    """Replicates ``topics`` of publisher host ``host_name`` to every node of the stream."""

    def __init__(
        self,
        config: StreamConfig,
        host_name: str,
        topics: list[str] | None = None,
        waiter: WaiterFactory = watch_directories,
    ) -> None:
        self.config = config
        self.host = config.publisher(host_name)
        self.root = config.data_dir_of(self.host) / "pub"
        self.dirs = [publisher_dir_name(t, host_name) for t in (topics or self.host.topics)]
        self._waiter = waiter
        self.on_ack: Callable[[str, str, Position], None] | None = None  # node, dir, position
        self._locks: dict[str, DirectoryLock] = {}  # dir -> its send lock, once taken
        self._sending: list[str] = []  # the directories this client sends (locked), in order
        self.acked: dict[str, dict[str, Position]] = {n.name: {} for n in config.nodes}
        self._deleted_below: dict[str, tuple[int, int]] = {}  # dir -> oldest file key kept
        self.connected: set[str] = set()
        self._last_ack: dict[str, float] = {}
        self._later: dict[str, bool] = {}  # node -> its last acknowledgement asked "later"
        self._verified: dict[str, dict[tuple[int, int], int]] = {}  # dir -> file -> checked to
        self.metrics = PushMetrics("client")
        self._context = client_context(config.tls, host_name)
        self._attempted: set[str] = set()  # slots that tried to connect at least once
        self._refusals = {n.name: Refusals() for n in config.nodes}
        self._current: dict[str, str] = {}  # node -> the directory last offered or sent
        self.ready = asyncio.Event()  # set once every slot has tried

    def status_line(self) -> str:
        """One line for systemd's status: which nodes hold a connection."""
        held = ", ".join(sorted(self.connected)) or "none"
        return f"connected to {len(self.connected)}/{len(self.config.nodes)} node(s) ({held})"

    def _tried(self, slot: str) -> None:
        self._attempted.add(slot)
        if len(self._attempted) == len(self.config.nodes):
            self.ready.set()

    def lock(self) -> None:
        """Take the send lock of every directory now; SenderLockedError if another
        process sends one (nothing is kept locked then)."""
        try:
            for d in self.dirs:
                self._take(d)
        except SenderLockedError:
            self.unlock()
            raise

    def unlock(self) -> None:
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()
        self._sending.clear()

    def _take(self, d: str) -> None:
        directory = self.root / d
        directory.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(directory, SEND_LOCK_NAME, "sender", SenderLockedError)
        self._locks[d] = lock
        self._sending = [x for x in self.dirs if x in self._locks]

    async def _take_over(self, stop: asyncio.Event) -> None:
        """Take the directories another process sends once it stops (the daemon)."""
        said: set[str] = set()
        while not stop.is_set():
            for d in self.dirs:
                if d in self._locks:
                    continue
                try:
                    self._take(d)
                except SenderLockedError as exc:
                    if d not in said:
                        log.error("not sending %s: %s; taking it over when it stops", d, exc)
                        said.add(d)
                    continue
                if d in said:
                    log.info("sending %s: the other sender stopped", d)
            if len(self._locks) == len(self.dirs):
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SENDER_LOCK_RETRY_S):
                    await stop.wait()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Replicate until ``stop`` is set (or, without one, until cancelled).

        Directories not locked yet (:meth:`lock`) are taken as soon as no other
        process sends them.
        """
        stop = stop or asyncio.Event()
        takeover = asyncio.create_task(self._take_over(stop))
        slots = [asyncio.create_task(self._slot(node, stop)) for node in self.config.nodes]
        stopped = asyncio.create_task(stop.wait())
        try:
            # A slot ends only on a bug: stop the daemon with it (a supervisor restarts it)
            # rather than keep running without replicating to that node.
            done, _ = await asyncio.wait([stopped, *slots], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped:
                    task.result()  # raises what ended the slot
        finally:
            stopped.cancel()
            takeover.cancel()
            for task in slots:
                task.cancel()
            await asyncio.gather(takeover, *slots, return_exceptions=True)

    async def _slot(self, node: NodeConfig, stop: asyncio.Event) -> None:
        """Keep one connection to a node (direct) or to a not-yet-held node (load balancer)."""
        r = self.config.replication
        backoff = Backoff(r.reconnect_initial_ms / 1000, r.reconnect_max_ms / 1000)
        while not stop.is_set():
            name, connected = node.name, False
            try:
                try:
                    conn, name = await self._connect(node)
                finally:
                    self._tried(node.name)
                connected = True
                if self._refusals[name].stuck is None:
                    backoff.reset()
                try:
                    await self._stream(conn, name, stop)
                finally:
                    self.connected.discard(name)
                    self.metrics.connected.labels(node=name).set(0)
                    await conn.close()
            except (RTError, OSError, TimeoutError) as exc:
                self.metrics.reconnects.labels(node=name).inc()
                if connected:
                    self._connection_failed(name, exc, backoff)
                else:
                    log.warning("push to %s: %s; retrying", name, exc)
            await asyncio.sleep(backoff.next_delay())

    def _connection_failed(self, node: str, exc: BaseException, backoff: Backoff) -> None:
        """A connection that was up ended: count identical refusals, and when the node keeps
        refusing the same bytes say so once and retry at the slowest backoff."""
        d = self._current.get(node, self.dirs[0])
        where = Stuck(d, self.acked[node].get(d), str(exc) or type(exc).__name__)
        refusals = self._refusals[node]
        if refusals.refused(where):
            backoff.to_ceiling()
            self.metrics.stuck_total.labels(node=node).inc()
            self.metrics.stuck.labels(node, where.dir, where.file, where.offset, where.reason).set(
                1
            )
            log.error(
                "push to %s is stuck: refused %d times in a row at %s; retrying every %g s "
                "until the node takes it (rt replication status shows it)",
                node,
                refusals.count,
                where.describe(),
                backoff.max_s,
            )
        elif refusals.stuck is not None:  # said once; nothing moved since: stay quiet
            log.debug("push to %s still stuck: %s", node, where.describe())
        else:
            log.warning("push to %s: %s; retrying", node, exc)

    def _moved(self, node: str) -> None:
        """The node acknowledged new bytes: whatever was stuck is not any more."""
        was = self._refusals[node].progressed()
        if was is not None:
            self.metrics.stuck.remove(node, was.dir, was.file, was.offset, was.reason)
            log.info("push to %s moves again past %s", node, was.describe())

    async def _connect(self, node: NodeConfig) -> tuple[Connection, str]:
        lb = self.config.load_balancer
        if lb is None:
            conn, name = await connect(
                node.host,
                self.config.ports.push,
                self._context,
                self.config,
                self.host.name,
                "push",
                node.name,
            )
        else:
            host, _, port = lb.rpartition(":")
            conn, name = await connect(
                host, int(port), self._context, self.config, self.host.name, "push", None
            )
            if name in self.connected:
                await conn.close()
                raise RTError(f"load balancer gave {name}, already connected; trying again")
        self.connected.add(name)
        self.metrics.connected.labels(node=name).set(1)
        quiet = self._refusals[name].stuck is not None  # said once already: do not repeat
        (log.debug if quiet else log.info)("push connected to %s", name)
        return conn, name

    async def _stream(self, conn: Connection, node: str, stop: asyncio.Event) -> None:
        self._later[node] = False  # until this connection's node says otherwise
        sources: dict[str, DirectorySource] = {}
        try:
            for d in list(self._sending):
                self._current[node] = d
                await conn.send(FrameType.OFFER, {"dir": d})
                fields = await conn.receive_control(FrameType.RESUME)
                position = Position.parse(require(fields, "position", int))
                self.acked[node][d] = position
                # Shared with the other nodes' sources: each byte's CRC is checked once.
                checked = self._verified.setdefault(d, {})
                limit = conn.max_frame_bytes - FRAME_MARGIN_BYTES
                sources[d] = DirectorySource(self.root / d, position, limit, checked)
                log.info("push %s to %s: resuming at %d", d, node, position)
            window = _Window(self.acked[node])
            acks = asyncio.create_task(self._read_acks(conn, node, window))
            try:
                await self._send_loop(conn, node, sources, acks, window, stop)
            finally:
                acks.cancel()
                await asyncio.gather(acks, return_exceptions=True)
        finally:
            for source in sources.values():
                source.close()

    async def _send_loop(
        self,
        conn: Connection,
        node: str,
        sources: dict[str, DirectorySource],
        acks: asyncio.Task[None],
        window: _Window,
        stop: asyncio.Event,
    ) -> None:
        """Send chunks as they appear; a peer that stops acking for ack_timeout is gone.

        A write wakes the loop at once, and one chunk carries everything written since
        the last one. At most ``PUSH_WINDOW_FRAMES`` frames are on their way unacked: a
        lone message leaves at once, and while the window is full what the publisher
        writes piles up and goes out in one frame when an acknowledgement opens it, so
        under load frames grow and the work per message (frames, writes, syncs, acks on
        every node) falls.
        """
        timeout = self.config.replication.ack_timeout_ms / 1000
        sent = {d: source.position for d, source in sources.items()}
        self._last_ack[node] = time.monotonic()
        next_lag_update = 0.0
        offered = len(sources)
        watcher = self._waiter([self.root / d for d in sources])
        try:
            while not stop.is_set():
                if len(self._sending) != offered:  # a directory was taken over: offer it too
                    log.info("push to %s: reconnecting to offer %s", node, self._sending[-1])
                    return
                if acks.done():
                    acks.result()  # raises why the connection ended
                    return
                waiting = any(sent[d] > self.acked[node].get(d, Position.ZERO) for d in sent)
                if waiting and time.monotonic() - self._last_ack[node] > timeout:
                    raise TransportError(f"{node} acknowledged nothing for {timeout:g}s")
                sent_any = False
                for d, source in sources.items():
                    if window.full():
                        break
                    chunk = source.read()
                    if chunk is not None:
                        self._current[node] = d
                        await conn.send_data(d, chunk.position, chunk.data, timeout)
                        sent[d] = chunk.next_position
                        if chunk.records:  # a piece of a record is acked with its last one
                            window.sent(d, chunk.next_position)
                        trace.event("send", f"{node}/{d}", int(chunk.next_position))
                        series = self.metrics.of(node, d)
                        series.bytes.inc(len(chunk.data))
                        self.metrics.records_of(node, d).inc(chunk.records)
                        series.chunks.inc()
                        sent_any = True
                if sent_any:
                    # One write wakes every node's sender: let the others send it too
                    # before this one looks for more, so a majority has it sooner.
                    await asyncio.sleep(0)
                if time.monotonic() >= next_lag_update:
                    self._update_lag(node)
                    next_lag_update = time.monotonic() + LAG_UPDATE_S
                if window.full():
                    await window.wait_open(min(PUSH_IDLE_WAIT_S, timeout / 4))
                elif not sent_any:
                    woken = await watcher.wait(min(PUSH_IDLE_WAIT_S, timeout / 4))
                    if woken and self._later.get(node):
                        # no merge waits for this node's copy now: a new write goes to
                        # it a little later, with what follows, after raft's round
                        await asyncio.sleep(PUSH_LATER_S)
        finally:
            watcher.close()

    def _update_lag(self, node: str) -> None:
        for d in self._sending:
            acked = self.acked[node].get(d, Position.ZERO)
            lag = bytes_after(self.root / d, acked.session, acked.roll, acked.offset)
            self.metrics.lag_bytes.labels(node=node, dir=d).set(lag)

    async def _read_acks(self, conn: Connection, node: str, window: _Window) -> None:
        while True:
            frame_type, body = await conn.receive()
            fields = decode_control(frame_type, body)
            if frame_type == FrameType.ERROR:
                raise RTError(f"{node} refused: {fields.get('message')}")
            if frame_type != FrameType.ACK:
                raise RTError(f"{node} sent frame type {frame_type}, expected ACK")
            d, position = (
                require(fields, "dir", str),
                Position.parse(require(fields, "position", int)),
            )
            if position > self.acked[node].get(d, Position.ZERO):
                self._moved(node)
            self.acked[node][d] = position
            self._later[node] = fields.get("later") is True
            window.acked()
            self._last_ack[node] = time.monotonic()
            self.metrics.of(node, d).acked_position.set(int(position))
            if self.on_ack is not None:
                self.on_ack(node, d, position)
            if self.config.replication.delete_acked:
                self._delete_acked(d)

    def _delete_acked(self, d: str) -> None:
        """Delete rolled files of ``d`` that every node has acknowledged past."""
        marks = [self.acked[n.name].get(d) for n in self.config.nodes]
        if any(m is None for m in marks):
            return
        oldest = min(m.file_key for m in marks if m is not None)
        if self._deleted_below.get(d) == oldest:
            return  # nothing rolled past since the last look
        self._deleted_below[d] = oldest
        directory = self.root / d
        deleted = False
        for f in list_files(directory):
            if f.key >= oldest:
                break
            try:
                os.unlink(f.path)
            except FileNotFoundError:
                continue
            deleted = True
            self.metrics.deleted_files.labels(dir=d).inc()
            log.info("deleted %s: every node holds it", f.path)
        if deleted:
            fsync_dir(directory)


def publisher_root(config: StreamConfig, host_name: str) -> Path:
    """Where publisher host ``host_name`` writes (``<data_dir>/pub``)."""
    return config.data_dir_of(config.publisher(host_name)) / "pub"


class _Window:
    """The frames sent on one connection and not acknowledged yet (their directory and
    end), at most ``PUSH_WINDOW_FRAMES``."""

    def __init__(self, acked: dict[str, Position]) -> None:
        self._acked = acked  # the client's acknowledged positions of this node, by directory
        self._frames: collections.deque[tuple[str, Position]] = collections.deque()
        self._opened = asyncio.Event()

    def sent(self, d: str, end: Position) -> None:
        self._frames.append((d, end))

    def full(self) -> bool:
        if len(self._frames) < PUSH_WINDOW_FRAMES:
            return False
        self._frames = collections.deque(
            (d, end) for d, end in self._frames if end > self._acked.get(d, Position.ZERO)
        )
        return len(self._frames) >= PUSH_WINDOW_FRAMES

    def acked(self) -> None:
        """An acknowledgement came (after :attr:`acked` moved): a full window may open."""
        self._opened.set()

    async def wait_open(self, timeout_s: float) -> None:
        """Until an acknowledgement comes, or ``timeout_s``."""
        self._opened.clear()
        if self.full():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._opened.wait()
