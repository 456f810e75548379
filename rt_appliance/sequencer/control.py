"""The sequencer's control channel (``ports.control``, mutual TLS, the stream's framing).

Requests, each answered by one frame:

* ``REPORT {"extents": {dir: position}, "holds": {name: position}, "ends": {dir:
  [position]}}`` from a node's sequencer: how far it durably holds each input, the
  holds of its merged-log consumers (:mod:`rt_appliance.sequencer.holds`; optional), and
  where its copies of each input's files end from the merged position on, all but the
  newest (optional: a node of an earlier release sends none). Only the leader takes
  reports (answered ``STATE {"leader": name}``); any other node answers
  ``NOT_LEADER {"leader": name or null}`` so the reporter redials the leader. A reporter
  does not wait for an answer before its next report (up to ``REPORT_WINDOW``
  unanswered), and asks for one only now and then (``"ask": true``, at most every
  ``REPORT_ASK_S``): the leader answers only a report that asks, or one with no
  ``ask`` (a reporter of an earlier release, answered every time), and its answer
  says how many reports it has read on the connection (``"reports": n``).
* ``STATUS {}`` from any host of the stream (``rt status``): answered ``STATE``
  with this node's status.
"""

from __future__ import annotations

import asyncio
import collections
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
    REPORT_ASK_S,
    REPORT_RETRY_FIRST_S,
    REPORT_WINDOW,
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
_LEADER_MOVED = object()  # a report session ended because raft named another leader


class ControlServer:
    """Answers REPORT (leader only) and STATUS on ``node.host:ports.control``."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        leader: Callable[[], str | None],
        on_report: Callable[
            [str, dict[str, int], dict[str, int], dict[str, list[int]] | None, list[str]], None
        ],
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
        reports = 0  # REPORT frames read on this connection
        try:
            while True:
                frame_type, body = await conn.receive()
                fields = decode_control(frame_type, body)
                if frame_type == FrameType.REPORT:
                    reports += 1
                    await self._report(conn, fields, reports)
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

    async def _report(self, conn: Connection, fields: dict[str, Any], reports: int) -> None:
        """Take a report (``reports``: how many this connection has carried, this one
        counted); answer it if it asks."""
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
        ends = fields.get("ends")
        if ends is not None and not isinstance(ends, dict):
            raise FrameError(f"frame field 'ends' is not an object: {ends!r}")
        wants = fields.get("leases", [])
        if not isinstance(wants, list):
            raise FrameError(f"frame field 'leases' is not a list: {wants!r}")
        self.on_report(
            conn.peer,
            _positions(extents),
            _positions(holds),
            None if ends is None else _position_lists(ends),
            [w for w in wants if isinstance(w, str)],
        )
        if fields.get("ask", True) is not False:  # no "ask": an earlier release's reporter
            await conn.send(FrameType.STATE, {"leader": self.name, "reports": reports})


def _positions(fields: dict[str, Any]) -> dict[str, int]:
    """The entries of a name -> position object that are positions."""
    return {
        str(k): v
        for k, v in fields.items()
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64
    }


def _position_lists(fields: dict[str, Any]) -> dict[str, list[int]]:
    """The entries of a name -> [position] object, each list's positions only."""
    return {
        str(k): [p for p in v if isinstance(p, int) and not isinstance(p, bool) and p >= 0]
        for k, v in fields.items()
        if isinstance(v, list)
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
        defer: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """``cheap()``: whether ``report()`` may run on the loop now (no file to read);
        otherwise it runs in a worker thread. ``defer()``: how long a change waits before
        it is reported (0: at once)."""
        self.config, self.name, self.leader, self.report, self.changed = (
            config,
            node_name,
            leader,
            report,
            changed,
        )
        self.cheap, self.defer = cheap, defer
        self._context = client_context(config.tls, node_name)
        self.sent = 0

    async def run(self) -> None:
        interval = self.config.sequencer.report_interval_ms / 1000
        backoff = REPORT_RETRY_FIRST_S
        while True:
            leader = self.leader()
            if leader is None or leader == self.name:
                await self._wait(interval)
                continue
            conn: Connection | None = None
            try:
                conn = await self._dial(leader)
                named = await self._session(conn, leader, interval)
            except (
                RTError,
                OSError,
                ssl.SSLError,
                TimeoutError,
                asyncio.IncompleteReadError,
            ) as exc:
                log.info("control: report to %s failed: %s", leader, exc)
                backoff = await self._back_off(backoff, interval)
                continue
            finally:
                if conn is not None:
                    await conn.close()
            if named is not _LEADER_MOVED:
                log.info("control: %s is not the leader (it names %s)", leader, named)
                backoff = await self._back_off(backoff, interval)
            else:
                backoff = REPORT_RETRY_FIRST_S

    async def _session(self, conn: Connection, leader: str, interval: float) -> object:
        """Report to ``leader`` on ``conn`` until raft names another leader (returns
        ``_LEADER_MOVED``) or ``leader`` answers NOT_LEADER (returns the leader it names).

        Reports are pipelined: one leaves as soon as something changed, without waiting
        for an answer, up to ``REPORT_WINDOW`` the leader has not been heard to read;
        with no change, one leaves every ``interval``. A report asks for an answer only
        when none is awaited and ``REPORT_ASK_S`` passed since the last asked (or half
        the window is unanswered): the answers say the leader reads this connection and
        how far, at a small fraction of the reports' cost. A busy leader thus hears a
        follower's newest extents as soon as it reads its connection, not a round trip
        per report later. The session ends as soon as raft names another leader,
        whatever is unanswered (an old leader cut off by a partition never answers, and
        the new one cannot merge until it hears from a majority); an asked report still
        unanswered after ``REPORT_ANSWER_S`` ends it with a TransportError."""
        answers = _Answers()
        reader = asyncio.create_task(self._read_answers(conn, answers))
        loop = asyncio.get_running_loop()
        last_sent = last_asked = -interval
        deferred = True  # the change waiting now has been deferred once (the first report
        # of a session, to a leader that may have just taken over, leaves at once)
        try:
            while True:
                if reader.done():
                    return reader.result()  # NOT_LEADER's name, or raises why it ended
                if self.leader() != leader:
                    return _LEADER_MOVED  # dial the new one at once, whatever is unanswered
                now = loop.time()
                if answers.asked and now - answers.asked[0][1] >= REPORT_ANSWER_S:
                    raise TransportError(f"no answer from {leader} within {REPORT_ANSWER_S:.0f} s")
                if answers.unanswered >= REPORT_WINDOW:  # full: the next answer opens it
                    answers.opened.clear()
                    await _until(answers.opened, LEADER_CHECK_S)
                    continue
                if self.changed.is_set() or now - last_sent >= interval:
                    delay = self.defer() if self.changed.is_set() and not deferred else 0.0
                    if delay > 0:
                        deferred = True  # later changes join this report
                        await asyncio.sleep(delay)
                        continue  # the checks above again (the leader may have moved)
                    deferred = False
                    self.changed.clear()
                    fields = self.report() if self.cheap() else await asyncio.to_thread(self.report)
                    ask = not answers.asked and (
                        now - last_asked >= REPORT_ASK_S
                        or answers.unanswered + 1 >= REPORT_WINDOW // 2
                    )
                    fields["ask"] = ask
                    await conn.send(FrameType.REPORT, fields)
                    last_sent = loop.time()
                    answers.sent_one(ask, last_sent)
                    if ask:
                        last_asked = last_sent
                    self.sent += 1
                    continue
                wait = interval - (now - last_sent)
                await _until(self.changed, min(wait, LEADER_CHECK_S) if answers.asked else wait)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read_answers(self, conn: Connection, answers: _Answers) -> object:
        """Take the leader's answers; returns the leader a NOT_LEADER names (None if it
        knows none). Every answer sets ``answers.opened`` (a full window opens)."""
        try:
            while True:
                frame_type, body = await conn.receive()
                if frame_type == FrameType.NOT_LEADER:
                    return decode_control(frame_type, body).get("leader")
                if frame_type != FrameType.STATE:
                    raise FrameError(f"answer of frame type {frame_type} to a report")
                answers.answered(decode_control(frame_type, body).get("reports"))
        finally:  # the session ends: the sending loop sees it at once
            answers.opened.set()
            self.changed.set()

    async def _back_off(self, backoff: float, interval: float) -> float:
        """After a failed report: wait ``backoff`` whatever changes meanwhile (input keeps
        changing while the leader is away, and would otherwise retry at once, thousands
        of times a second), then as usual; returns the next, doubled backoff."""
        await asyncio.sleep(backoff)
        await self._wait(max(0.0, interval - backoff))
        return min(backoff * 2, max(interval, REPORT_RETRY_FIRST_S))

    async def _wait(self, interval: float) -> None:
        await _until(self.changed, interval)
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


class _Answers:
    """What a report session knows of the leader's answers: reports sent, how many the
    leader has said it read, and the asked ones awaiting an answer (number, when sent).

    A leader of this release answers asked reports only, saying how many it has read;
    one of an earlier release answers every report, in order, saying nothing: each of
    its answers counts one more."""

    def __init__(self) -> None:
        self.sent = 0
        self.read = 0
        self.asked: collections.deque[tuple[int, float]] = collections.deque()
        self.opened = asyncio.Event()  # an answer came

    @property
    def unanswered(self) -> int:
        return self.sent - self.read

    def sent_one(self, ask: bool, when: float) -> None:
        self.sent += 1
        if ask:
            self.asked.append((self.sent, when))

    def answered(self, reports: object) -> None:
        # an earlier release's leader answers every report, saying no count
        read = reports if type(reports) is int else self.read + 1
        if read <= self.read or read > self.sent:
            raise FrameError(f"an answer to report {read}, of {self.sent} sent")
        self.read = read
        while self.asked and self.asked[0][0] <= read:
            self.asked.popleft()
        self.opened.set()


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Until ``event`` is set, or ``timeout_s`` (no task per wait, as wait_for makes)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout_s)):
            await event.wait()


async def query_status(config: StreamConfig, as_host: str, node_name: str) -> dict[str, Any]:
    """One node's status over its control channel (``as_host``: whose certificate to use)."""
    node = config.node(node_name)
    context = client_context(config.tls, as_host)
    conn, _ = await connect(
        node.host, config.ports.control, context, config, as_host, STATUS_ROLE, node_name
    )
    try:
        await conn.send(FrameType.STATUS, {})
        async with asyncio.timeout(STATUS_ANSWER_S):
            frame_type, body = await conn.receive()
        if frame_type != FrameType.STATE:
            raise TransportError(f"{node_name} answered frame type {frame_type} to STATUS")
        return decode_control(frame_type, body)
    finally:
        await conn.close()
