"""The push server: receives publisher directories into ``<data_dir>/in/`` on an RT node.

One per node, inside ``rt node``. A publisher host's push client connects,
offers each of its directories; the server answers with where its replica ends
(``RESUME``), then appends every ``DATA`` chunk that continues exactly there and
holds whole, CRC-valid records, syncs it (``replication.fsync``) and acks the
durable end. A publisher certificate may write only its own host's directories,
and only topics the configuration lists for that host.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

from rt_appliance import trace
from rt_appliance.config.model import HostRole, StreamConfig
from rt_appliance.errors import CorruptLogError, LogFullError, PeerRejectedError, RTError
from rt_appliance.limits import HANDSHAKE_TIMEOUT_S, SHUTDOWN_GRACE_S
from rt_appliance.log.naming import parse_publisher_dir
from rt_appliance.position import Position
from rt_appliance.replicate.push_metrics import PushMetrics
from rt_appliance.replicate.sink import DAMAGED_DIR, FileEnd, ReplicaDir
from rt_appliance.transport.messages import FrameType, decode_control, decode_data, require
from rt_appliance.transport.offload import in_thread
from rt_appliance.transport.server import TlsServer
from rt_appliance.transport.session import Connection, accept
from rt_appliance.transport.tls import server_context

__all__ = ["PushServer"]

log = logging.getLogger(__name__)


class PushServer:
    """Accepts push connections for node ``node_name`` until stopped."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        on_synced: Callable[[], None] | None = None,
        on_write_failure: Callable[[BaseException], None] | None = None,
        on_written: Callable[[], None] | None = None,
        later: Callable[[], bool] | None = None,
    ) -> None:
        """In the node process, on this loop: ``on_synced()`` after each sync,
        ``on_written()`` after each frame written (before its sync), and
        ``on_write_failure(exc)`` when writing or syncing an input failed. ``later()``:
        whether this node's copy is not what merges wait for now (a follower while the
        leader carries the input): its acknowledgements then ask publishers to send it
        their writes a little later, together (``"later": true``)."""
        self.config = config
        self._on_synced = on_synced
        self._on_written = on_written
        self._later = later
        self._on_write_failure = on_write_failure
        self.node = config.node(node_name)
        self.in_dir = config.data_dir_of(self.node) / "in"
        self.metrics = PushMetrics("server")
        self._replicas: dict[str, ReplicaDir] = {}
        self._connections = 0  # publisher connections past the handshake
        self.ready = asyncio.Event()  # set once listening, with every replica scanned

    def held(self, name: str) -> Position | None:
        """How far the replica ``name`` is synced (None: no replica open by that name)."""
        replica = self._replicas.get(name)
        return None if replica is None else replica.synced

    def written(self, name: str) -> Position | None:
        """How far the replica ``name`` is written, synced or not (None: none open)."""
        replica = self._replicas.get(name)
        return None if replica is None else replica.end

    def names(self) -> list[str]:
        """The replicas this server has open (every input a publisher offered it)."""
        return list(self._replicas)

    def file_end(self, name: str, key: tuple[int, int]) -> FileEnd | None:
        """How file ``key`` of the replica ``name`` ended, if a sender was seen moving on
        from it since this server started (:meth:`ReplicaDir.file_end`)."""
        replica = self._replicas.get(name)
        return None if replica is None else replica.file_end(key)

    def status_line(self) -> str:
        """One line for systemd's status: connections and replicas."""
        return f"{self._connections} publisher connection(s), {len(self._replicas)} replica(s)"

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (or, without one, until cancelled)."""
        server = TlsServer(
            server_context(self.config.tls, self.node.name),
            self._connection,
            self._refuse_handshake,
            HANDSHAKE_TIMEOUT_S,
        )
        self._scan_replicas()
        await server.start(self.node.host, self.config.ports.push)
        self.ready.set()
        log.info(
            "push server %s listening on %s:%d, replicas in %s",
            self.node.name,
            self.node.host,
            self.config.ports.push,
            self.in_dir,
        )
        try:
            await (stop or asyncio.Event()).wait()
        finally:
            await server.stop(SHUTDOWN_GRACE_S)
            for replica in self._replicas.values():
                replica.close()

    def _scan_replicas(self) -> None:
        """Open (and recover) every replica already on disk, before accepting connections."""
        if not self.in_dir.is_dir():
            return
        for path in sorted(self.in_dir.iterdir()):
            if path.is_dir() and parse_publisher_dir(path.name) is not None:
                try:
                    self._replicas[path.name] = self._open_replica(path.name)
                except RTError as exc:  # refused again, with the reason, when it is offered
                    log.error("replica %s unusable: %s", path.name, exc)

    def _open_replica(self, name: str) -> ReplicaDir:
        replica = ReplicaDir(self.in_dir / name, fsync=self.config.replication.fsync != "never")
        if replica.repaired is not None:
            self.metrics.repaired.inc()
            log.error(
                "replica %s was damaged (%s): kept a copy in %s and cut it there; "
                "the publisher's push client sends the rest again",
                name,
                replica.repaired,
                DAMAGED_DIR,
            )
        if replica.recovery is not None:
            log.warning(
                "replica %s: cut a torn tail of %d bytes", name, replica.recovery.lost_bytes
            )
        return replica

    def _refuse_handshake(self, address: str, exc: Exception) -> None:
        self.metrics.rejected.labels(reason="tls").inc()
        log.warning("push connection from %s refused in the TLS handshake: %s", address, exc)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> None:
        conn: Connection | None = None
        try:
            conn, _ = await accept(
                reader, writer, self.config, self.node.name, {HostRole.PUBLISHER}
            )
            log.info("push connection from %s (%s)", conn.peer, address)
            self._connections += 1
            try:
                await self._serve(conn)
            finally:
                self._connections -= 1
        except PeerRejectedError as exc:
            self.metrics.rejected.labels(reason=_reason(exc)).inc()
            log.warning("push connection from %s refused: %s", address, exc)
        except RTError as exc:
            log.warning("push connection from %s ended: %s", conn.peer if conn else address, exc)
        except (TimeoutError, ConnectionError) as exc:
            log.warning("push connection from %s ended: %s", address, exc)
        except asyncio.CancelledError:
            log.info("push connection from %s closed: server stopping", address)
        finally:
            if conn is not None:
                await conn.close()
            else:
                writer.close()

    async def _serve(self, conn: Connection) -> None:
        offered: set[str] = set()
        pending: dict[str, ReplicaDir] = {}  # written, not yet synced and acked
        wake = asyncio.Event()
        acker = asyncio.create_task(self._ack_loop(conn, pending, wake))
        acker.add_done_callback(partial(_abort_on_failure, conn))
        try:
            while not acker.done():
                frame_type, body = await conn.receive()
                if frame_type == FrameType.DATA:
                    name = await self._data(conn, body, offered)
                    pending[name] = self._replicas[name]
                    wake.set()
                elif frame_type == FrameType.OFFER:
                    name = require(decode_control(frame_type, body), "dir", str)
                    replica = await self._offer(conn, name)
                    offered.add(name)
                    await conn.send(FrameType.RESUME, {"dir": name, "position": int(replica.end)})
                    log.info("%s offers %s: resume at %d", conn.peer, name, replica.end)
                else:
                    await conn.error(f"unexpected frame type {frame_type}", retryable=False)
                    return
            acker.result()
        except RTError:
            if acker.done() and not acker.cancelled() and acker.exception() is not None:
                acker.result()  # why the connection ended: the acker's error, not the abort
            raise
        finally:
            acker.cancel()
            await asyncio.gather(acker, return_exceptions=True)

    async def _ack_loop(
        self, conn: Connection, pending: dict[str, ReplicaDir], wake: asyncio.Event
    ) -> None:
        """Sync what was written, then ack it (group commit).

        A sync starts as soon as a frame was written and none is running; it covers
        exactly what was written before it began, and is acknowledged as that. Frames
        that arrive while it runs are written meanwhile and wait for the next sync, which
        covers them all at once: batches grow with the load, never by waiting.
        """
        durable = self.config.replication.fsync != "never"
        while True:
            await wake.wait()
            wake.clear()
            batch = list(pending.items())
            pending.clear()
            for name, replica in batch:
                fd, end = replica.sync_handle()
                try:
                    # the worker closes the descriptor when its sync ends, even if this
                    # task is cancelled meanwhile: never closed under a running sync
                    if durable:
                        await in_thread(_datasync_and_close, fd)
                    else:
                        os.close(fd)
                except OSError as exc:
                    self.metrics.refused_chunks.labels(dir=name, reason="sync_failed").inc()
                    if self._on_write_failure is not None:
                        self._on_write_failure(exc)
                    replica.cut_unsynced(exc)  # raises: the connection ends, nothing acked
                replica.mark_synced(end)
                trace.event("synced", f"{self.node.name}/{name}", int(end))
                if self._on_synced is not None:
                    self._on_synced()
                self.metrics.of(self.node.name, name).acked_position.set(int(end))
                ack: dict[str, object] = {"dir": name, "position": int(end)}
                if self._later is not None and self._later():
                    ack["later"] = True
                await conn.send(FrameType.ACK, ack)

    async def _offer(self, conn: Connection, name: str) -> ReplicaDir:
        parsed = parse_publisher_dir(name)
        allowed = self.config.publisher(conn.peer).topics
        if parsed is None or parsed[1] != conn.peer or parsed[0] not in allowed:
            message = f"{conn.peer} may not write {name!r} (its topics: {', '.join(allowed)})"
            await conn.error(message, retryable=False)
            raise PeerRejectedError(message)
        replica = self._replicas.get(name)
        if replica is None:
            try:
                replica = self._open_replica(name)
            except RTError as exc:
                await conn.error(
                    f"replica {name} on {self.node.name} unusable: {exc}", retryable=False
                )
                raise
            self._replicas[name] = replica
        return replica

    async def _data(self, conn: Connection, body: bytes, offered: set[str]) -> str:
        """Check and write one DATA frame (not synced yet); returns its directory."""
        data = decode_data(body)
        if data.dir not in offered:
            await conn.error(f"DATA for {data.dir!r}, which was not offered", retryable=False)
            raise PeerRejectedError(f"{conn.peer} sent DATA for un-offered {data.dir!r}")
        try:
            replica = self._replicas[data.dir]
            replica.append(data.position, data.payload, sync=False)
            trace.event("in", f"{self.node.name}/{data.dir}", int(replica.end))
            if self._on_written is not None:
                self._on_written()
        except RTError as exc:
            reason = (
                "disk_full"
                if isinstance(exc, LogFullError)
                else "corrupt"
                if isinstance(exc, CorruptLogError)
                else "error"
            )
            self.metrics.refused_chunks.labels(dir=data.dir, reason=reason).inc()
            if self._on_write_failure is not None:
                self._on_write_failure(exc)
            await conn.error(
                f"{self.node.name} refused data for {data.dir}: {exc}", retryable=False
            )
            raise
        series = self.metrics.of(self.node.name, data.dir)
        series.bytes.inc(len(data.payload))
        series.chunks.inc()
        return data.dir


def _abort_on_failure(conn: Connection, acker: asyncio.Task[None]) -> None:
    """An acker that failed ends its connection at once, not at the client's next frame."""
    if not acker.cancelled() and acker.exception() is not None:
        conn.abort()


def _reason(exc: PeerRejectedError) -> str:
    text = str(exc)
    return "certificate" if "certificate" in text else "role" if "is a" in text else "request"


def replica_path(config: StreamConfig, node_name: str, dir_name: str) -> Path:
    """Where node ``node_name`` keeps its replica of publisher directory ``dir_name``."""
    return config.data_dir_of(config.node(node_name)) / "in" / dir_name


def _datasync_and_close(fd: int) -> None:
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
