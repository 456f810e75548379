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
import os
import threading
import time
from pathlib import Path

from rt_appliance.config import StreamConfig, load_config
from rt_appliance.errors import UsageError
from rt_appliance.limits import PUBLISHER_CLOSE_LINGER_S
from rt_appliance.log.naming import publisher_dir_name
from rt_appliance.position import Position
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.wake import PublishWake

__all__ = ["Replicator", "replication_config"]

log = logging.getLogger(__name__)


def replication_config(replicate: str | os.PathLike[str] | StreamConfig) -> StreamConfig:
    """The stream configuration a Publisher replicates with (a path or a loaded one)."""
    return replicate if isinstance(replicate, StreamConfig) else load_config(Path(replicate))


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
        self._loop = asyncio.new_event_loop()
        self._wake = PublishWake(self._loop)
        self.client = PushClient(config, host, [topic], waiter=self._wake.waiter)
        expected = self.client.root / self.dir
        if directory.resolve() != expected.resolve():
            self._loop.close()
            raise UsageError(
                f"a Publisher that replicates writes where stream {config.stream} says host "
                f"{host} publishes: {self.client.root} (its data_dir + /pub), not "
                f"{directory.parent}"
            )
        self.client.lock()  # SenderLockedError: another process sends this directory
        self.notify = self._wake.notify
        self._acked = threading.Condition()
        self.client.on_ack = self._on_ack
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rt-push-{topic}")
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except Exception:
            log.exception("the push client of %s stopped", self.dir)
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._started.set()
        await self.client.run(self._stop)

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
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._acked.wait(min(left, 0.5))
        return True

    def close(self, end: Position, linger_s: float = PUBLISHER_CLOSE_LINGER_S) -> None:
        """Wait up to ``linger_s`` for every connected node to acknowledge ``end``, then
        stop the thread and release the directory (what is left stays on disk)."""
        connected = len(self.client.connected)
        if connected and not self.wait(end, connected, linger_s):
            log.warning(
                "%s: closing before every connected node acknowledged %s (acknowledged: %s); "
                "the next sender resumes from there",
                self.dir,
                end,
                ", ".join(f"{n} {p}" for n, p in sorted(self.acknowledged().items())),
            )
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        self.client.unlock()
