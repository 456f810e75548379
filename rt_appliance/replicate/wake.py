"""How a sender learns that a publisher directory grew.

Two ways, one shape (:class:`Waiter`):

* the ``rt push-client`` daemon watches the directories (inotify,
  :class:`~rt_appliance.log.watch.AsyncDirectoryWatcher`): the writer is another process;
* an application's own Publisher (``Publisher(..., replicate=...)``) calls
  :meth:`PublishWake.notify` after each append: the sender runs in the same process,
  so the write itself wakes it, with no inotify and no system call while the sender
  is busy anyway.

A waiter is made before the sender reads, so a write after the read makes the next
:meth:`Waiter.wait` return at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from rt_appliance.log.watch import AsyncDirectoryWatcher

__all__ = ["PublishWake", "Waiter", "WaiterFactory", "watch_directories"]


class Waiter(Protocol):
    async def wait(self, timeout_s: float) -> bool:
        """Until something was written since the last wait, or ``timeout_s``."""
        ...

    def close(self) -> None: ...


WaiterFactory = Callable[[list[Path]], Waiter]


def watch_directories(directories: list[Path]) -> Waiter:
    """The daemon's waiter: inotify on the directories."""
    return AsyncDirectoryWatcher(*directories)


class PublishWake:
    """Wakes the senders on one event loop when the application writes.

    :meth:`notify` may be called from any thread, as often as the application
    publishes: it schedules a wake on the loop only when a sender has looked at
    the files since the last one (``_armed``), so a busy sender costs the publisher
    one attribute read per message.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: set[asyncio.Event] = set()
        self._armed = True

    def notify(self) -> None:
        """The application appended: wake every waiting sender (any thread)."""
        if self._armed:
            self._armed = False
            self._loop.call_soon_threadsafe(self._set_all)

    def _set_all(self) -> None:
        for event in self._events:
            event.set()

    def waiter(self, directories: list[Path]) -> Waiter:
        return _EventWaiter(self)


class _EventWaiter:
    def __init__(self, wake: PublishWake) -> None:
        self._wake = wake
        self._event = asyncio.Event()
        self._event.set()  # the first wait returns at once: read before waiting
        wake._events.add(self._event)

    async def wait(self, timeout_s: float) -> bool:
        if not self._event.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):  # no task per wait, as wait_for makes
                    await self._event.wait()
        woken = self._event.is_set()
        self._event.clear()
        self._wake._armed = True  # the caller reads next: a write after it wakes us again
        return woken

    def close(self) -> None:
        self._wake._events.discard(self._event)
