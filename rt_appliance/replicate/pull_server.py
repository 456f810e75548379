"""The pull server (inside ``rt node``): a node's merged log, streamed to subscriber hosts.

Per connection, after TLS and the HELLO/WELCOME identity check (subscriber hosts
and nodes may pull)::

    -> METADATA {}          <- TOPOLOGY {stream, nodes, leader}    (any number of times)
    -> PULL {position}      <- PRUNE {before}   (the oldest file here; again when it changes)
                            <- DATA ...         (whole records from position on, then new ones)

No state is kept per client and nothing is acknowledged: the client says where its
copy ends, the server streams from there and follows new data (one inotify watch
wakes every connection). A pruned position gets ``ERROR {message, retryable, oldest}``.

A node whose HELLO says role ``fetch`` (only nodes may) instead sends any number of
``FETCH {dir, position, max_bytes}`` and gets one ``FETCHED`` each: raw bytes of one
file of ``merged`` or ``in/<topic>.<host>`` (see :mod:`.fetch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import time
from asyncio import StreamReader as Reader
from asyncio import StreamWriter as Writer
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge

from rt_appliance import trace
from rt_appliance.config.model import HostRole, StreamConfig
from rt_appliance.errors import (
    CorruptLogError,
    FrameError,
    InvalidPositionError,
    PeerRejectedError,
    PositionPrunedError,
    RTError,
    TransportError,
)
from rt_appliance.heartbeat import known_leader, merged_log_stale
from rt_appliance.limits import (
    FOLLOW_POLL_S,
    FRAME_MARGIN_BYTES,
    HANDSHAKE_TIMEOUT_S,
    INLINE_READ_BYTES,
    LAG_UPDATE_S,
    PRUNE_CHECK_EVERY_S,
    REFUSAL_DRAIN_S,
    SHUTDOWN_GRACE_S,
    STALE_CHECK_S,
)
from rt_appliance.log.segments import ListingCache
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import (
    FETCH_ROLE,
    FetchRequest,
    fetch_dir,
    read_part,
    send_fetched,
)
from rt_appliance.replicate.fresh import FreshRecords
from rt_appliance.replicate.topology import (
    DirectoryChanges,
    ServedStream,
    oldest_position,
    pull_source_dir,
)
from rt_appliance.replicate.topology import topology as topology_fields
from rt_appliance.transport.messages import (
    FrameType,
    decode_control,
    require,
)
from rt_appliance.transport.server import TlsServer
from rt_appliance.transport.session import Connection, accept, finish_in_thread
from rt_appliance.transport.tls import server_context

__all__ = ["PullServer", "ServerMetrics"]

log = logging.getLogger(__name__)

_ROLES = {HostRole.SUBSCRIBER, HostRole.NODE}


class ServerMetrics:
    """The pull server's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.sent_bytes = Counter("rt_pull_server_sent_bytes", "Bytes sent", registry=r)
        self.sent_records = Counter("rt_pull_server_sent_records", "Records sent", registry=r)
        self.from_memory = Counter(
            "rt_pull_server_from_memory_records",
            "Records sent from memory as they were applied, before the merged log held them",
            registry=r,
        )
        self.connections = Gauge("rt_pull_server_connections", "Clients connected", registry=r)
        self.accepted = Counter("rt_pull_server_accepted", "Handshakes passed", registry=r)
        self.rejected = Counter("rt_pull_server_rejected", "Connections refused", registry=r)
        self.prunes = Counter("rt_pull_server_prunes_sent", "PRUNE frames sent", registry=r)
        self.lag = Gauge("rt_pull_server_lag_bytes", "Bytes unsent", ["peer"], registry=r)
        self.redirected = Counter(
            "rt_pull_server_redirected",
            "Clients sent to another node: this node's sequencer was silent or without quorum",
            registry=r,
        )
        self.fetches = Counter(
            "rt_pull_server_fetches", "FETCH requests answered (FETCHED sent)", registry=r
        )
        self.fetched_bytes = Counter(
            "rt_pull_server_fetched_bytes", "File bytes sent in FETCHED frames", registry=r
        )


class PullServer:
    """Serves ``pull_source_dir(config, node)`` on ``node.host:ports.pull`` until stopped."""

    def __init__(
        self, config: StreamConfig, node_name: str, metrics: ServerMetrics, watch: bool = True
    ) -> None:
        """``watch=False``: in the node process, the merger calls :meth:`changed` instead
        of an inotify watch waking the connections."""
        self.config = config
        self._watch = watch
        self.node = config.node(node_name)
        self.name = node_name
        self.directory = pull_source_dir(config, self.node)
        # the oldest file's start, listed again only when a file is added or removed
        self._oldest = ListingCache(self.directory, oldest_position)
        self.metrics = metrics
        self._server = TlsServer(
            server_context(config.tls, node_name),
            self._connection,
            self._refuse,
            HANDSHAKE_TIMEOUT_S,
        )
        self._chunk_bytes = config.replication.max_frame_bytes - FRAME_MARGIN_BYTES
        self._changes: DirectoryChanges | None = None
        # the node's newest committed records, sent from memory (replicate/fresh.py);
        # only for the node's own merged log, on the loop's thread
        self.fresh = FreshRecords()
        self._own_merged = self.directory == config.data_dir_of(self.node) / "merged"
        self._loop_thread: int | None = None
        self._oldest_due = 0.0  # when to look for a new oldest file again (monotonic)
        self._oldest_seen: Position | None = None
        self._clients = 0  # connections being served
        self.ready = asyncio.Event()  # set once listening

    def changed(self) -> None:
        """The served directory changed (any thread): every streaming connection looks."""
        self._oldest_due = 0.0  # a prune or a new file: look at once
        if self._changes is not None:
            self._changes.notify()

    def fresh_record(self, position: int, record: bytes, records: int) -> bool:
        """A merged record this node just applied (its bytes, checked against the commit):
        every streaming connection that stands where it starts sends it now. On the
        loop's thread only; anywhere else (or serving another directory) it is left to
        the merger's write, as any record (False)."""
        if not self._own_merged or self._changes is None:
            return False
        if threading.get_ident() != self._loop_thread:
            return False
        self.fresh.add(position, record, records)
        self._changes.changed_here()
        return True

    def status_line(self) -> str:
        """One line for systemd's status: connections served."""
        return f"serving {self.directory}: {self._clients} connection(s)"

    async def start(self) -> None:
        """Watch the directory (made if missing: the merger may not have started) and listen."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._changes = DirectoryChanges(self.directory, watch=self._watch)
        self._loop_thread = threading.get_ident()
        host, port = self.node.host, self.config.ports.pull
        try:
            await self._server.start(host, port)
        except TransportError:
            await self._changes.close()
            raise
        log.info("%s serves %s on %s:%d", self.name, self.directory, host, port)
        self.ready.set()

    async def stop(self) -> None:
        """Stop listening, end every connection, stop watching."""
        await self._server.stop(SHUTDOWN_GRACE_S)
        if self._changes is not None:
            await self._changes.close()
        log.info("%s stopped serving %s", self.name, self.directory)

    def _refuse(self, address: str, exc: Exception) -> None:
        self.metrics.rejected.inc()
        log.warning("%s refused a pull connection from %s: %s", self.name, address, exc)

    async def _connection(self, reader: Reader, writer: Writer, address: str) -> None:
        try:
            conn, hello = await accept(reader, writer, self.config, self.name, _ROLES)
            fetcher = hello.get("role") == FETCH_ROLE
            if fetcher:
                await self._check_fetcher(conn)
        except (ssl.SSLError, OSError, TimeoutError, RTError) as exc:
            self._refuse(address, exc)
            writer.close()
            return
        self.metrics.accepted.inc()
        self.metrics.connections.inc()
        self._clients += 1
        purpose = " to fetch" if fetcher else ""
        log.info("%s: %s connected from %s%s", self.name, conn.peer, address, purpose)
        try:
            await (self._serve_fetches(conn) if fetcher else self._converse(conn))
        except (RTError, TimeoutError) as exc:
            log.info("%s: %s (%s) disconnected: %s", self.name, conn.peer, address, exc)
        finally:
            self.metrics.connections.dec()
            self._clients -= 1
            await conn.close()

    async def _converse(self, conn: Connection) -> None:
        """Answer METADATA until the client sends PULL, then stream."""
        while True:
            frame_type, body = await conn.receive()
            if frame_type == FrameType.METADATA:
                decode_control(frame_type, body)
                await conn.send(
                    FrameType.TOPOLOGY,
                    topology_fields(self.config, known_leader(self.config, self.node)),
                )
            elif frame_type == FrameType.PULL:
                fields = decode_control(frame_type, body)
                await self._pull(conn, Position.parse(require(fields, "position", int)))
                return
            else:
                await conn.error(f"unexpected frame type {frame_type}", retryable=False)
                raise FrameError(f"{conn.peer} sent frame type {frame_type} before PULL")

    async def _check_fetcher(self, conn: Connection) -> None:
        """Refuse a ``fetch`` connection from a host that is not a node. It was already
        welcomed (subscriber hosts may connect), so the ERROR goes out now and what the
        client sent meanwhile is read until it closes: unread bytes would make the close
        a reset, which could discard the ERROR before the client reads it."""
        if self.config.role_of(conn.peer) is HostRole.NODE:
            return
        problem = f"host {conn.peer!r} is a {self.config.role_of(conn.peer)}: only nodes may FETCH"
        await conn.error(problem, retryable=False)
        with contextlib.suppress(RTError, TimeoutError):
            async with asyncio.timeout(REFUSAL_DRAIN_S):
                while True:
                    await conn.receive()
        raise PeerRejectedError(problem)

    async def _serve_fetches(self, conn: Connection) -> None:
        """Answer each FETCH with one FETCHED until the node leaves; anything else (a bad
        request, another frame) gets an ERROR and ends the connection."""
        while True:
            frame_type, body = await conn.receive()
            if frame_type != FrameType.FETCH:
                await conn.error(f"unexpected frame type {frame_type}", retryable=False)
                raise FrameError(f"{conn.peer} sent frame type {frame_type} instead of FETCH")
            try:
                request = FetchRequest.parse(decode_control(frame_type, body))
                directory = fetch_dir(self.config, self.node, request.dir)
            except (FrameError, PeerRejectedError) as exc:
                log.warning("%s: refused a FETCH from %s: %s", self.name, conn.peer, exc)
                await conn.error(str(exc), retryable=False)
                raise
            limit = min(request.max_bytes, self._chunk_bytes)
            try:
                fetched = await finish_in_thread(
                    partial(read_part, directory, request.position, limit)
                )
            except RTError as exc:
                log.error("%s: cannot answer a FETCH from %s: %s", self.name, conn.peer, exc)
                await conn.error(f"{self.name} cannot read: {exc}", retryable=True)
                raise
            await send_fetched(conn, request.dir, fetched)
            self.metrics.fetches.inc()
            self.metrics.fetched_bytes.inc(len(fetched.data))
            log.debug(
                "%s: %s fetched %d bytes of %s at %s", self.name, conn.peer, len(fetched.data),
                request.dir, request.position.format(),
            )  # fmt: skip

    async def _pull(self, conn: Connection, position: Position) -> None:
        """Stream from ``position`` until the client leaves (or the server stops)."""
        try:
            stream = await finish_in_thread(
                partial(ServedStream, self.directory, position, self._chunk_bytes)
            )
        except PositionPrunedError as exc:
            await self._refuse_pruned(conn, position, exc)
            return
        except InvalidPositionError as exc:
            log.warning("%s: %s asked for %s: %s", self.name, conn.peer, position.format(), exc)
            await conn.error(str(exc), retryable=False)
            return
        where = f"{self.directory} from position {position} ({position!r})"
        log.info("%s: %s pulls %s", self.name, conn.peer, where)
        sender = asyncio.create_task(self._send(conn, stream))
        listener = asyncio.create_task(conn.receive())  # from here on a client only closes
        try:
            done, _ = await asyncio.wait({sender, listener}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                sender.result()
            elif listener.exception() is not None:
                raise TransportError(f"{conn.peer} left: {listener.exception()}")
            else:
                raise FrameError(f"{conn.peer} sent a frame while pulling")
        finally:
            for task in (sender, listener):
                task.cancel()
            await asyncio.gather(sender, listener, return_exceptions=True)
            await finish_in_thread(stream.source.close)
            with contextlib.suppress(KeyError):
                self.metrics.lag.remove(conn.peer)
            log.info("%s: %s stopped at position %s", self.name, conn.peer, stream.sent.format())

    async def _send(self, conn: Connection, stream: ServedStream) -> None:
        assert self._changes is not None
        oldest: Position | None = None
        lag_at = 0.0
        stale_check = time.monotonic() + STALE_CHECK_S  # a client just came: give it a moment
        inline = False  # at the tail: the next read is small, done on the loop
        try:
            while True:
                seen = self._changes.generation
                oldest = await self._announce_prune(conn, oldest)
                chunk = self._fresh_chunk(stream)
                if chunk is None:
                    chunk = stream.read() if inline else await finish_in_thread(stream.read)
                    inline = chunk is None or len(chunk[1]) < INLINE_READ_BYTES
                if chunk is None:
                    self.metrics.lag.labels(conn.peer).set(0)
                    stale = self._stale() if time.monotonic() >= stale_check else None
                    if stale:  # other nodes may be merging: let the client go to one of them
                        log.warning("%s: sending %s elsewhere: %s", self.name, conn.peer, stale)
                        self.metrics.redirected.inc()
                        await conn.error(f"{self.name}'s merged log is not growing: {stale}", True)
                        return
                    stale_check = time.monotonic() + STALE_CHECK_S
                    await self._changes.wait(seen, FOLLOW_POLL_S)
                    continue
                position, data, records = chunk
                await conn.send_data(self.config.stream, position, data)
                trace.event("pulled", f"{self.name}/{conn.peer}", int(stream.sent))
                self.metrics.sent_bytes.inc(len(data))
                self.metrics.sent_records.inc(records)
                if time.monotonic() - lag_at >= LAG_UPDATE_S:
                    lag_at = time.monotonic()
                    lag = await finish_in_thread(stream.lag_bytes)
                    self.metrics.lag.labels(conn.peer).set(lag)
        except PositionPrunedError as exc:
            await self._refuse_pruned(conn, stream.sent, exc)
        except CorruptLogError as exc:
            log.error("%s: cannot serve %s: %s", self.name, conn.peer, exc)
            await conn.error(f"{self.name} cannot serve: {exc}", retryable=True)

    def _fresh_chunk(self, stream: ServedStream) -> tuple[Position, bytes, int] | None:
        """The records kept in memory from where ``stream`` stands, if any (the stream
        then goes on after them)."""
        fresh = self.fresh.after(int(stream.sent), self._chunk_bytes)
        if fresh is None or not stream.skip(stream.sent, Position(fresh.end)):
            return None
        self.metrics.from_memory.inc(fresh.records)
        return Position(fresh.position), fresh.data, fresh.records

    def _stale(self) -> str | None:
        """Why the served merged log cannot grow now, if this node's sequencer says so."""
        if self.directory != self.config.data_dir_of(self.node) / "merged":
            return None  # a configured pull_source: no sequencer behind it
        return merged_log_stale(self.config, self.node)

    async def _announce_prune(self, conn: Connection, told: Position | None) -> Position | None:
        """PRUNE {before: the oldest file's start} when it differs from what ``conn`` was told
        (looked for after each wake by the merger, else every ``PRUNE_CHECK_EVERY_S``)."""
        now = time.monotonic()
        if now >= self._oldest_due:
            self._oldest_seen, self._oldest_due = self._oldest.get(), now + PRUNE_CHECK_EVERY_S
        oldest = self._oldest_seen
        if oldest is not None and oldest != told:
            await conn.send(FrameType.PRUNE, {"before": int(oldest)})
            self.metrics.prunes.inc()
            log.info("%s: told %s that the oldest file starts at %s", self.name, conn.peer, oldest)
            return oldest
        return told

    async def _refuse_pruned(self, conn: Connection, position: Position, exc: RTError) -> None:
        oldest = oldest_position(self.directory) or Position.ZERO
        message = f"position {position} was pruned on {self.name}; the oldest available is {oldest}"
        log.warning("%s: %s: %s (%s)", self.name, conn.peer, message, exc)
        fields = {"message": message, "retryable": False, "oldest": int(oldest)}
        with contextlib.suppress(RTError):
            await conn.send(FrameType.ERROR, fields)
