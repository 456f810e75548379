"""Pull replication's shared pieces: what a node serves and how it follows it, where
clients find nodes and in which order they try them.

Every node's merged log is byte-identical, so a pull client may read from any of
them. By default it prefers the leader, whose merged log is the first to hold a message
(a follower's waits for the leader's commit news and its own merge: at 5,000 msg/s on
one machine, half the p99); ``prefer: follower`` leaves the leader to sequence. The
node list is rotated by a stable hash of the host's name, which spreads subscriber
hosts over the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from rt_appliance.config.model import NodeConfig, StreamConfig, SubscriberHost
from rt_appliance.errors import FrameError
from rt_appliance.limits import FOLLOW_POLL_S
from rt_appliance.log.segments import bytes_after, list_files
from rt_appliance.log.watch import AsyncDirectoryWatcher
from rt_appliance.position import Position
from rt_appliance.replicate.source import DirectorySource
from rt_appliance.transport.messages import require

__all__ = [
    "DirectoryChanges",
    "Endpoint",
    "ServedStream",
    "candidate_order",
    "endpoints",
    "oldest_position",
    "parse_topology",
    "peer_endpoints",
    "pull_source_dir",
    "replica_dir",
    "topology",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A pull server as clients reach it: node name and advertised address."""

    name: str
    host: str
    port: int


def endpoints(config: StreamConfig) -> list[Endpoint]:
    """Every node's pull server, at its advertised host and port, in configuration order."""
    return [
        Endpoint(n.name, n.advertised_host or n.host, n.advertised_pull_port or config.ports.pull)
        for n in config.nodes
    ]


def peer_endpoints(config: StreamConfig) -> list[Endpoint]:
    """Every node's pull server as the other nodes reach it: its ``host`` and the pull
    port (the advertised address is for clients, which may reach it another way)."""
    return [Endpoint(n.name, n.host, config.ports.pull) for n in config.nodes]


def topology(config: StreamConfig, leader: str | None) -> dict[str, Any]:
    """The TOPOLOGY answer to METADATA (``leader`` is None until a sequencer names one)."""
    return {
        "stream": config.stream,
        "nodes": [{"name": e.name, "host": e.host, "port": e.port} for e in endpoints(config)],
        "leader": leader,
    }


def parse_topology(
    fields: dict[str, Any], config: StreamConfig
) -> tuple[list[Endpoint], str | None]:
    """The endpoints and leader of a TOPOLOGY frame; its stream must be ours."""
    if fields.get("stream") != config.stream:
        raise FrameError(f"TOPOLOGY for stream {fields.get('stream')!r}, not {config.stream!r}")
    found = []
    for node in require(fields, "nodes", list):
        if not isinstance(node, dict):
            raise FrameError(f"TOPOLOGY node is not an object: {node!r}")
        name, host = require(node, "name", str), require(node, "host", str)
        found.append(Endpoint(name, host, require(node, "port", int)))
    if not found:
        raise FrameError("TOPOLOGY names no nodes")
    leader = fields.get("leader")
    if leader is not None and not isinstance(leader, str):
        raise FrameError(f"TOPOLOGY leader is not a name: {leader!r}")
    return found, leader


def candidate_order(
    nodes: list[Endpoint],
    subscriber: str,
    leader: str | None,
    prefer: Literal["follower", "leader", "any"],
) -> list[Endpoint]:
    """The order in which ``subscriber`` tries ``nodes``: rotated by a stable hash of its
    name, then the leader moved last (prefer follower) or first (prefer leader)."""
    ordered = sorted(nodes, key=lambda e: e.name)
    if not ordered:
        return []
    start = zlib.crc32(subscriber.encode()) % len(ordered)
    ordered = ordered[start:] + ordered[:start]
    if leader is None or prefer == "any":
        return ordered
    chosen = [e for e in ordered if e.name == leader]
    others = [e for e in ordered if e.name != leader]
    return others + chosen if prefer == "follower" else chosen + others


def pull_source_dir(config: StreamConfig, node: NodeConfig) -> Path:
    """The directory a node's pull server serves: ``replication.pull_source`` or ``merged/``."""
    if config.replication.pull_source is not None:
        return Path(config.replication.pull_source.replace("{name}", node.name))
    return config.data_dir_of(node) / "merged"


def replica_dir(config: StreamConfig, subscriber: SubscriberHost) -> Path:
    """Where a subscriber host keeps its copy of the merged log."""
    return config.data_dir_of(subscriber) / "sub" / config.stream


class ServedStream:
    """What one client is sent, from its position on, and how far behind it is."""

    def __init__(self, directory: Path, position: Position, max_bytes: int) -> None:
        self.directory = directory
        self.source = DirectorySource(directory, position, max_bytes)
        self.sent = position  # where the client's copy ends once it has what was sent

    def read(self) -> tuple[Position, bytes, int] | None:
        chunk = self.source.read()
        if chunk is None:
            return None
        self.sent = chunk.next_position
        return chunk.position, chunk.data, chunk.records

    def skip(self, position: Position, end: Position) -> bool:
        """The records from ``position`` to ``end`` were sent from memory: go on after
        them (False: this stream does not stand at ``position``, nothing moved)."""
        if position != self.sent or not self.source.skip(position, end):
            return False
        self.sent = end
        return True

    def lag_bytes(self) -> int:
        """Bytes in the directory after :attr:`sent`."""
        return bytes_after(self.directory, self.sent.session, self.sent.roll, self.sent.offset)


class DirectoryChanges:
    """Wakes every waiting connection when the served directory changes: one inotify
    watch, or (``watch=False``, in the node process) :meth:`notify` from the merger."""

    def __init__(self, directory: Path, watch: bool = True) -> None:
        self.generation = 0
        self._notified = False  # a notice is on its way to the loop
        self._event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._watcher = AsyncDirectoryWatcher(directory) if watch else None
        self._task: asyncio.Task[None] | None = None
        if self._watcher is not None:
            self._task = asyncio.create_task(self._run())
            self._task.add_done_callback(_watch_ended)

    async def _run(self) -> None:
        assert self._watcher is not None
        while True:
            if await self._watcher.wait(FOLLOW_POLL_S):
                self._changed()

    def _changed(self) -> None:
        self._notified = False
        self.generation += 1
        self._event.set()
        self._event = asyncio.Event()

    def changed_here(self) -> None:
        """The directory changed, or will at once (on the loop's thread): every waiting
        connection looks now."""
        self._changed()

    def notify(self) -> None:
        """The directory changed (any thread). Notices that come before the loop has
        taken the last one are one wake: the connections read everything there is."""
        if not self._notified:
            self._notified = True
            self._loop.call_soon_threadsafe(self._changed)

    async def wait(self, seen: int, timeout_s: float) -> None:
        """Until the generation moves past ``seen`` (read before reading) or ``timeout_s``."""
        if self.generation == seen:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):  # no task per wait, as wait_for makes
                    await self._event.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._watcher is not None:
            self._watcher.close()


def _watch_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.critical(
            "the watch of the served directory stopped (%r); connections fall back to "
            "polling every %.1f s",
            task.exception(),
            FOLLOW_POLL_S,
        )


def oldest_position(directory: Path) -> Position | None:
    """The start of the oldest stream file in ``directory``, None if it has none."""
    files = list_files(directory)
    return Position.of(files[0].session, files[0].roll, 0) if files else None
