"""The pull client inside an application's Subscriber (``Subscriber(pull=..., host=...)``).

The same :class:`~rt_appliance.replicate.pull_client.PullClient` as ``rt pull-client``,
on a thread of the application: it keeps the subscriber host's copy of the merged log
(same files, same positions, fail-over to any node), and every chunk it appends wakes
the application's readers at once (:class:`Arrivals`), with no inotify in between.

One writer per copy: a second pull client on the same copy (another application, or
an ``rt pull-client``) gets :class:`~rt_appliance.errors.LogLockedError`.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from rt_appliance.config import StreamConfig
from rt_appliance.errors import UsageError
from rt_appliance.replicate.pull_client import ClientMetrics, PullClient
from rt_appliance.replicate.topology import replica_dir
from rt_appliance.transport.background import LoopThread

__all__ = ["Arrivals", "Puller"]


class Arrivals:
    """Counts the chunks the pull client appended; readers wait for the count to move."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self.failure: BaseException | None = None  # what stopped the pull client

    def arrived(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def failed(self, exc: BaseException) -> None:
        with self._cond:
            self.failure = exc
            self._cond.notify_all()

    def waiter(self, *_: Path) -> ArrivalWaiter:
        return ArrivalWaiter(self)


class ArrivalWaiter:
    """The :class:`~rt_appliance.log.watch.DirectoryWatcher` shape, woken by arrivals."""

    def __init__(self, arrivals: Arrivals) -> None:
        self._arrivals = arrivals
        self._seen = arrivals._count

    def wait(self, timeout_s: float) -> bool:
        a = self._arrivals
        with a._cond:
            if a._count == self._seen and a.failure is None:
                a._cond.wait(timeout_s)
            if a.failure is not None:
                raise a.failure
            changed = a._count != self._seen
            self._seen = a._count
        return changed

    def close(self) -> None:
        """Nothing to release: the arrivals belong to the puller."""

    def __enter__(self) -> ArrivalWaiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Puller:
    """Keeps subscriber host ``host``'s copy from a thread of this process."""

    def __init__(self, config: StreamConfig, host: str, directory: Path | None) -> None:
        expected = replica_dir(config, config.subscriber(host))
        if directory is not None and directory.resolve() != expected.resolve():
            raise UsageError(
                f"a Subscriber that pulls reads the copy stream {config.stream} keeps for "
                f"host {host}: {expected}, not {directory}"
            )
        self.directory = expected
        self.arrivals = Arrivals()
        self.metrics = ClientMetrics()
        self.client = PullClient(config, host, self.metrics)  # LogLockedError: copy taken
        self.client.on_change = self.arrivals.arrived
        self._thread = LoopThread(f"rt-pull-{host}", self._main)
        self._thread.start()

    async def _main(self, stop: asyncio.Event) -> None:
        pulling = asyncio.create_task(self.client.run())
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([pulling, stopped], return_when=asyncio.FIRST_COMPLETED)
            if pulling.done():
                exc = pulling.exception()
                self.arrivals.failed(exc or RuntimeError("the pull client stopped"))
        finally:
            pulling.cancel()
            stopped.cancel()
            await asyncio.gather(pulling, stopped, return_exceptions=True)

    def close(self) -> None:
        self._thread.stop()
