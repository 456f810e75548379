"""The sequencer's control channel (``ports.control``, mutual TLS, the stream's framing).

Requests, each answered by one frame:

* ``REPORT {"extents": {dir: position}, "holds": {name: position}}`` from a node's
  sequencer: how far it durably holds each input, and the holds of its merged-log
  consumers (:mod:`rt_appliance.sequencer.holds`; optional). Only the leader takes
  reports; any other node answers
  ``NOT_LEADER {"leader": name or null}`` so the reporter redials the leader.
* ``STATUS {}`` from any host of the stream (``rt status``): answered ``STATE``
  with this node's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from rt_appliance.config.model import HostRole, StreamConfig
from rt_appliance.errors import FrameError, RTError, TransportError
from rt_appliance.limits import (
    HANDSHAKE_TIMEOUT_S,
    LEADER_CHECK_S,
    REPORT_ANSWER_S,
    REPORT_RETRY_FIRST_S,
    SHUTDOWN_GRACE_S,
    STATUS_ANSWER_S,
)
from rt_appliance.transport.messages import FrameType, decode_control, require
from rt_appliance.transport.server import TlsServer
from rt_appliance.transport.session import Connection, accept, connect
from rt_appliance.transport.tls import client_context, server_context

__all__ = ["ControlServer", "Reporter", "query_status"]

log = logging.getLogger(__name__)

_ALL_ROLES = {HostRole.NODE, HostRole.PUBLISHER, HostRole.SUBSCRIBER}
STATUS_ROLE = "status"
REPORT_ROLE = "sequencer"


class ControlServer:
    """Answers REPORT (leader only) and STATUS on ``node.host:ports.control``."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        leader: Callable[[], str | None],
        on_report: Callable[[str, dict[str, int], dict[str, int]], None],
        status: Callable[[], Awaitable[dict[str, Any]]],
        on_refused: Callable[[], None],
    ) -> None:
        self.config, self.name = config, node_name
        self.leader, self.on_report, self.status, self.on_refused = (
            leader,
            on_report,
            status,
            on_refused,
        )
        self._server = TlsServer(
            server_context(config.tls, node_name),
            self._connection,
            self._refuse,
            HANDSHAKE_TIMEOUT_S,
        )

    async def start(self) -> None:
        host, port = self.config.node(self.name).host, self.config.ports.control
        await self._server.start(host, port)
        log.info("control channel on %s:%d", host, port)

    async def stop(self) -> None:
        await self._server.stop(SHUTDOWN_GRACE_S)

    def _refuse(self, address: str, exc: Exception) -> None:
        self.on_refused()
        log.warning("control: refused a connection from %s: %s", address, exc)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> None:
        try:
            conn, _hello = await accept(reader, writer, self.config, self.name, _ALL_ROLES)
        except (ssl.SSLError, OSError, TimeoutError, RTError) as exc:
            self._refuse(address, exc)
            writer.close()
            return
        try:
            while True:
                frame_type, body = await conn.receive()
                fields = decode_control(frame_type, body)
                if frame_type == FrameType.REPORT:
                    await self._report(conn, fields)
                elif frame_type == FrameType.STATUS:
                    await conn.send(FrameType.STATE, await self.status())
                else:
                    raise FrameError(f"unexpected frame type {frame_type} on the control channel")
        except (RTError, asyncio.IncompleteReadError, OSError, ssl.SSLError) as exc:
            if not isinstance(exc, asyncio.IncompleteReadError):
                log.info("control: connection from %s ended: %s", conn.peer, exc)
                await conn.error(str(exc), retryable=True)
        finally:
            await conn.close()

    async def _report(self, conn: Connection, fields: dict[str, Any]) -> None:
        if self.config.role_of(conn.peer) is not HostRole.NODE:
            raise FrameError(f"{conn.peer} is not a node and cannot report extents")
        leader = self.leader()
        if leader != self.name:
            await conn.send(FrameType.NOT_LEADER, {"leader": leader})
            return
        extents = require(fields, "extents", dict)
        holds = fields.get("holds", {})
        if not isinstance(holds, dict):
            raise FrameError(f"frame field 'holds' is not an object: {holds!r}")
        self.on_report(conn.peer, _positions(extents), _positions(holds))
        await conn.send(FrameType.STATE, {"leader": self.name})


def _positions(fields: dict[str, Any]) -> dict[str, int]:
    """The entries of a name -> position object that are positions."""
    return {
        str(k): v
        for k, v in fields.items()
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64
    }


class Reporter:
    """A follower's task: send this node's extents and holds to the leader, on change
    and periodically. ``report`` gives the REPORT frame's fields."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        leader: Callable[[], str | None],
        report: Callable[[], dict[str, Any]],
        changed: asyncio.Event,
        cheap: Callable[[], bool] = lambda: False,
    ) -> None:
        """``cheap()``: whether ``report()`` may run on the loop now (no file to read);
        otherwise it runs in a worker thread."""
        self.config, self.name, self.leader, self.report, self.changed = (
            config,
            node_name,
            leader,
            report,
            changed,
        )
        self.cheap = cheap
        self._context = client_context(config.tls, node_name)
        self.sent = 0

    async def run(self) -> None:
        interval = self.config.sequencer.report_interval_ms / 1000
        conn: Connection | None = None
        target: str | None = None
        backoff = REPORT_RETRY_FIRST_S
        while True:
            leader = self.leader()
            if leader is None or leader == self.name:
                if conn is not None:
                    await conn.close()
                    conn = None
                await self._wait(interval)
                continue
            try:
                if conn is None or target != leader:
                    if conn is not None:
                        await conn.close()
                    conn, target = await self._dial(leader), leader
                fields = self.report() if self.cheap() else await asyncio.to_thread(self.report)
                await conn.send(FrameType.REPORT, fields)
                frame_type, body = await self._answer(conn, leader)
                self.sent += 1
                if frame_type == FrameType.NOT_LEADER:
                    log.info(
                        "control: %s is not the leader (it names %s)",
                        leader,
                        decode_control(frame_type, body).get("leader"),
                    )
                    await conn.close()
                    conn = None
                    backoff = await self._back_off(backoff, interval)
                    continue
                backoff = REPORT_RETRY_FIRST_S
            except (
                RTError,
                OSError,
                ssl.SSLError,
                TimeoutError,
                asyncio.IncompleteReadError,
            ) as exc:
                log.info("control: report to %s failed: %s", leader, exc)
                if conn is not None:
                    await conn.close()
                conn = None
                backoff = await self._back_off(backoff, interval)
                continue
            await self._wait(interval)

    async def _answer(self, conn: Connection, leader: str) -> tuple[int, bytes]:
        """The leader's answer to a report, within :data:`REPORT_ANSWER_S`; given up as soon as
        raft names another leader (an old leader cut off by a partition never answers,
        and the new one must hear from this node to merge)."""
        receive = asyncio.ensure_future(conn.receive())
        deadline = asyncio.get_running_loop().time() + REPORT_ANSWER_S
        try:
            while True:
                done, _ = await asyncio.wait({receive}, timeout=LEADER_CHECK_S)
                if done:
                    return receive.result()
                now = self.leader()
                if now != leader:
                    raise TransportError(f"no answer from {leader}, and the leader is now {now}")
                if asyncio.get_running_loop().time() >= deadline:
                    raise TransportError(f"no answer from {leader} within {REPORT_ANSWER_S:.0f} s")
        finally:
            if not receive.done():
                receive.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await receive

    async def _back_off(self, backoff: float, interval: float) -> float:
        """After a failed report: wait ``backoff`` whatever changes meanwhile (input keeps
        changing while the leader is away, and would otherwise retry at once, thousands
        of times a second), then as usual; returns the next, doubled backoff."""
        await asyncio.sleep(backoff)
        await self._wait(max(0.0, interval - backoff))
        return min(backoff * 2, max(interval, REPORT_RETRY_FIRST_S))

    async def _wait(self, interval: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await self.changed.wait()
        self.changed.clear()

    async def _dial(self, leader: str) -> Connection:
        node = self.config.node(leader)
        conn, _ = await connect(
            node.host,
            self.config.ports.control,
            self._context,
            self.config,
            self.name,
            REPORT_ROLE,
            leader,
        )
        return conn


async def query_status(config: StreamConfig, as_host: str, node_name: str) -> dict[str, Any]:
    """One node's status over its control channel (``as_host``: whose certificate to use)."""
    node = config.node(node_name)
    context = client_context(config.tls, as_host)
    conn, _ = await connect(
        node.host, config.ports.control, context, config, as_host, STATUS_ROLE, node_name
    )
    try:
        await conn.send(FrameType.STATUS, {})
        frame_type, body = await asyncio.wait_for(conn.receive(), STATUS_ANSWER_S)
        if frame_type != FrameType.STATE:
            raise TransportError(f"{node_name} answered frame type {frame_type} to STATUS")
        return decode_control(frame_type, body)
    finally:
        await conn.close()
