"""The push client inside an application's Publisher (``Publisher(..., replicate=...)``).

The same :class:`~rt_appliance.replicate.push_client.PushClient` as ``rt push-client``,
on a thread of the application with an event loop of its own. The Publisher wakes it
after every append (:class:`~rt_appliance.replicate.wake.PublishWake`), so a message
leaves for the nodes without an inotify wake or another process in between.

Nothing is lost if the application dies: the records are in its directory, and the
next Publisher on it (or an ``rt push-client``) resumes from what each node
acknowledged. One sender per directory: the send lock is taken before the thread
starts, and a second sender gets :class:`~rt_appliance.errors.SenderLockedError`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

from rt_appliance.config import StreamConfig
from rt_appliance.errors import UsageError
from rt_appliance.limits import PUBLISHER_CLOSE_LINGER_S
from rt_appliance.log.naming import publisher_dir_name
from rt_appliance.position import Position
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.wake import PublishWake
from rt_appliance.transport.background import LoopThread

__all__ = ["Replicator"]

log = logging.getLogger(__name__)


class Replicator:
    """Sends one publisher directory to every node, from a thread of this process."""

    def __init__(self, config: StreamConfig, host: str, topic: str, directory: Path) -> None:
        publisher = config.publisher(host)  # a clear error for a host not in the stream
        if topic not in publisher.topics:
            raise UsageError(
                f"topic {topic!r} is not one of publisher host {host}'s topics in stream "
                f"{config.stream} ({', '.join(publisher.topics)})"
            )
        self.dir = publisher_dir_name(topic, host)
        self._thread = LoopThread(f"rt-push-{topic}", self._main)
        self._wake = PublishWake(self._thread.loop)
        self.client = PushClient(config, host, [topic], waiter=self._wake.waiter)
        expected = self.client.root / self.dir
        if directory.resolve() != expected.resolve():
            self._thread.loop.close()
            raise UsageError(
                f"a Publisher that replicates writes where stream {config.stream} says host "
                f"{host} publishes: {self.client.root} (its data_dir + /pub), not "
                f"{directory.parent}"
            )
        try:
            self.client.lock()  # SenderLockedError: another process sends this directory
        except BaseException:
            self._thread.loop.close()
            raise
        self.notify = self._wake.notify
        self._acked = threading.Condition()
        self.client.on_ack = self._on_ack
        self._thread.start()

    async def _main(self, stop: asyncio.Event) -> None:
        await self.client.run(stop)

    def _on_ack(self, node: str, d: str, position: Position) -> None:
        with self._acked:
            self._acked.notify_all()

    def acknowledged(self) -> dict[str, Position]:
        """How far each node has acknowledged the directory (ZERO: nothing yet)."""
        return {n: marks.get(self.dir, Position.ZERO) for n, marks in self.client.acked.items()}

    def wait(self, position: Position, nodes: int, timeout_s: float) -> bool:
        """Until ``nodes`` nodes acknowledged up to ``position``; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._acked:
            while sum(p >= position for p in self.acknowledged().values()) < nodes:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.alive:
                    return False
                self._acked.wait(min(left, 0.5))
        return True

    def close(self, end: Position, linger_s: float = PUBLISHER_CLOSE_LINGER_S) -> None:
        """Wait up to ``linger_s`` for every node to acknowledge ``end``, then stop the
        thread and release the directory (what is left stays on disk)."""
        if not self.wait(end, len(self.client.acked), linger_s):
            log.warning(
                "%s: closing before every node acknowledged %s (acknowledged: %s); "
                "the next sender of the directory resumes from there",
                self.dir,
                end,
                ", ".join(f"{n} {p}" for n, p in sorted(self.acknowledged().items())),
            )
        self._thread.stop()
        self.client.unlock()
