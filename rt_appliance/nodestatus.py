"""The nodes' status, asked over their control channels: what ``rt status`` shows.

Every node's sequencer answers a ``STATUS`` request on ``ports.control`` (mutual TLS)
with a JSON object (:mod:`rt_appliance.sequencer.control`). :class:`StatusGatherer`
asks every node at once and gives each answer as a :class:`NodeStatus`, or an
:class:`Unreachable` saying why a node did not answer. :class:`StatusPoller` does the
same for callers without an event loop, on connections kept open between polls (for
polling loops such as timing a failover). :func:`status_document` is the document
``rt status --json`` prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import RTError, TransportError
from rt_appliance.limits import (
    NODE_STATUS_POLL_RETRY_S,
    NODE_STATUS_POLL_TIMEOUT_S,
    NODE_STATUS_TIMEOUT_S,
)
from rt_appliance.sequencer.control import STATUS_ROLE
from rt_appliance.transport.messages import FrameType, decode_control
from rt_appliance.transport.session import Connection, connect
from rt_appliance.transport.tls import client_context

__all__ = [
    "Answer",
    "InputStatus",
    "NodeStatus",
    "StatusGatherer",
    "StatusPoller",
    "Unreachable",
    "gather_status",
    "leader_of",
    "status_document",
]

# what asking a node can fail with; the node is then unreachable
_FAILURES = (RTError, OSError, TimeoutError, EOFError)


@dataclass(frozen=True, slots=True)
class InputStatus:
    """How far a node holds one input and how far it is merged."""

    held: int | None  # position up to which the node holds the input
    merged: int | None  # position up to which it is merged (None: nothing yet)
    lag_bytes: int  # bytes held but not merged yet

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InputStatus:
        return cls(d.get("held"), d.get("merged"), int(d.get("lag_bytes") or 0))


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One node's answer to ``STATUS``; ``raw`` is the answer as it came (for JSON)."""

    name: str
    software: str | None  # the node's release (None: a release before versions)
    role: str  # raft role: leader, follower, candidate
    leader: str | None  # the leader this node knows of
    term: int
    commit_index: int
    has_quorum: bool
    committed_seq: int  # merge instructions committed through raft
    merged_seq: int  # merge instructions written to this node's merged log
    merged_position: int  # end of this node's merged log
    digest: str | None  # digest of the merged log; equal seq and digest: identical logs
    halted: str | None  # why this node's merger stopped, if it did
    unfit_to_lead: str | None  # why this node stands for no election now (writes fail)
    not_voting: str | None  # why this node grants no vote yet (it started with no raft state)
    inputs: Mapping[str, InputStatus]
    disk_used_percent: float | None
    holds: Mapping[str, Mapping[str, Any]]  # local consumers' holds (rt_appliance.sequencer.holds)
    # committed leases (rt_appliance.sequencer.leases): holder, until, remaining_s
    leases: Mapping[str, Mapping[str, Any]]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], name: str | None = None) -> NodeStatus:
        """From the ``STATE`` answer (missing numbers are 0); ``name`` if it has none."""
        inputs = d.get("inputs") or {}
        return cls(
            name=str(d.get("name") or name or "?"),
            software=d.get("software") or None,
            role=str(d.get("role") or ""),
            leader=d.get("leader"),
            term=int(d.get("term") or 0),
            commit_index=int(d.get("commit_index") or 0),
            has_quorum=bool(d.get("has_quorum")),
            committed_seq=int(d.get("committed_seq") or 0),
            merged_seq=int(d.get("merged_seq") or 0),
            merged_position=int(d.get("merged_position") or 0),
            digest=d.get("digest"),
            halted=d.get("halted") or None,
            unfit_to_lead=d.get("unfit_to_lead") or None,
            not_voting=d.get("not_voting") or None,
            inputs={k: InputStatus.from_dict(v or {}) for k, v in inputs.items()},
            disk_used_percent=(d.get("disk") or {}).get("used_percent"),
            holds=d.get("holds") or {},
            leases=d.get("leases") or {},
            raw=d,
        )

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"

    @property
    def all_merged(self) -> bool:
        """Whether this node has written all it committed and holds no unmerged input."""
        return self.merged_seq == self.committed_seq and not any(
            i.lag_bytes for i in self.inputs.values()
        )

    @property
    def gaps(self) -> list[str]:
        """Holds whose consumer lost merged files it had not committed."""
        return [str(h["gap"]) for h in self.holds.values() if h.get("gap")]


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A node that did not answer, and why."""

    name: str
    error: str


Answer = NodeStatus | Unreachable


def leader_of(answers: Mapping[str, Answer]) -> str | None:
    """The leader the nodes in the leader role name, if they name exactly one."""
    leaders = {a.leader for a in answers.values() if isinstance(a, NodeStatus) and a.is_leader}
    return next(iter(leaders)) if len(leaders) == 1 else None


def status_document(stream: str, answers: Mapping[str, Answer]) -> dict[str, Any]:
    """What ``rt status --json`` prints: the stream, its leader and each node's answer
    (``reachable`` and ``error`` first), or ``{"name", "reachable": false, "error"}``."""
    nodes: list[dict[str, Any]] = [
        {"reachable": True, "error": None, **a.raw}
        if isinstance(a, NodeStatus)
        else {"name": a.name, "reachable": False, "error": a.error}
        for a in answers.values()
    ]
    return {"stream": stream, "leader": leader_of(answers), "nodes": nodes}


class StatusGatherer:
    """Asks nodes for their status, all at once, as ``as_host`` (whose certificate it uses).

    ``timeout_s`` bounds connecting and each answer. With ``keep_open`` the connections
    stay open for the next :meth:`gather` (close them with :meth:`aclose`), and a node
    that could not be reached is not dialled again within ``retry_s``.
    """

    def __init__(
        self,
        config: StreamConfig,
        as_host: str,
        timeout_s: float = NODE_STATUS_TIMEOUT_S,
        keep_open: bool = False,
        retry_s: float = 0.0,
    ) -> None:
        self.config, self.as_host = config, as_host
        self.timeout_s, self.keep_open, self.retry_s = timeout_s, keep_open, retry_s
        self.context = client_context(config.tls, as_host)
        self.conns: dict[str, Connection] = {}
        self.retry_at: dict[str, float] = {}  # no new connection to a node before this

    async def gather(self, nodes: Iterable[str] | None = None) -> dict[str, Answer]:
        """``{node: its status or why it is unreachable}`` for ``nodes`` (default: all),
        in the order given."""
        names = [n.name for n in self.config.nodes] if nodes is None else list(nodes)
        answers = await asyncio.gather(*(self.ask(n) for n in names))
        return dict(zip(names, answers, strict=True))

    async def ask(self, name: str) -> Answer:
        """One node's status, or why it could not be had."""
        try:
            conn = self.conns.get(name) or await self._connect(name)
        except _FAILURES as exc:
            return Unreachable(name, _why(exc))
        try:
            await conn.send(FrameType.STATUS, {})
            async with asyncio.timeout(self.timeout_s):
                frame_type, body = await conn.receive()
            if frame_type != FrameType.STATE:
                raise TransportError(f"{name} answered frame type {frame_type} to STATUS")
            answer = NodeStatus.from_dict(decode_control(frame_type, body), name)
        except _FAILURES as exc:
            await self._drop(name, conn)
            return Unreachable(name, _why(exc))
        if not self.keep_open:
            await self._drop(name, conn)
        return answer

    async def _connect(self, name: str) -> Connection:
        if time.monotonic() < self.retry_at.get(name, 0.0):
            raise TransportError(f"{name} was unreachable a moment ago")
        self.retry_at[name] = time.monotonic() + self.retry_s
        node = self.config.node(name)
        opening = connect(
            node.host,
            self.config.ports.control,
            self.context,
            self.config,
            self.as_host,
            STATUS_ROLE,
            name,
        )
        async with asyncio.timeout(self.timeout_s):
            conn, _peer = await opening
        if self.keep_open:
            self.conns[name] = conn
        self.retry_at.pop(name, None)
        return conn

    async def _drop(self, name: str, conn: Connection) -> None:
        self.conns.pop(name, None)
        with contextlib.suppress(Exception):
            await conn.close()

    async def aclose(self) -> None:
        """Close the connections kept open."""
        for name, conn in list(self.conns.items()):
            await self._drop(name, conn)


async def gather_status(
    config: StreamConfig,
    as_host: str,
    timeout_s: float = NODE_STATUS_TIMEOUT_S,
    nodes: Iterable[str] | None = None,
) -> dict[str, Answer]:
    """Every node's status (or ``nodes``'), asked once on connections of its own."""
    return await StatusGatherer(config, as_host, timeout_s).gather(nodes)


class StatusPoller:
    """A :class:`StatusGatherer` keeping its connections open, on an event loop of its
    own, for callers that have none; :meth:`close` it when done."""

    def __init__(
        self,
        config: StreamConfig,
        as_host: str,
        timeout_s: float = NODE_STATUS_POLL_TIMEOUT_S,
        retry_s: float = NODE_STATUS_POLL_RETRY_S,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.gatherer = StatusGatherer(config, as_host, timeout_s, keep_open=True, retry_s=retry_s)

    def poll(self, nodes: Iterable[str] | None = None) -> dict[str, Answer]:
        """``{node: its status or why it is unreachable}``."""
        return self.loop.run_until_complete(self.gatherer.gather(nodes))

    def close(self) -> None:
        self.loop.run_until_complete(self.gatherer.aclose())
        self.loop.close()


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
