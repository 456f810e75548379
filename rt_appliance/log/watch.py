"""Waiting for a stream file directory to change (inotify), for low-latency following."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from inotify_simple import INotify, flags

from rt_appliance.limits import DIRECTORY_POLL_S

__all__ = ["AsyncDirectoryWatcher", "DirectoryWatcher", "wait_for_directory"]

_MASK = (
    flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE | flags.DELETE | flags.ATTRIB
)


class DirectoryWatcher:
    """Wakes a follower when any file in the directories is written, created or deleted.

    Create it before reading: a change made between a read and :meth:`wait` is
    queued by the kernel, so the wait returns at once and nothing is missed.
    """

    def __init__(self, *directories: Path) -> None:
        self._inotify = INotify()
        try:
            for directory in directories:
                self._inotify.add_watch(str(directory), _MASK)
        except BaseException:
            self._inotify.close()
            raise

    def wait(self, timeout_s: float) -> bool:
        """Block until a change or ``timeout_s``; True if something changed."""
        events = self._inotify.read(timeout=int(timeout_s * 1000))
        return bool(events)

    def fileno(self) -> int:
        """The inotify descriptor: readable when a change is queued."""
        return int(self._inotify.fileno())

    def drain(self) -> bool:
        """Take every queued change without waiting; True if there was one."""
        return bool(self._inotify.read(timeout=0))

    def close(self) -> None:
        self._inotify.close()

    def __enter__(self) -> DirectoryWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for_directory(directory: Path, timeout_s: float) -> bool:
    """Poll until ``directory`` exists (a follower started before its publisher)."""
    deadline = time.monotonic() + timeout_s
    while not directory.is_dir():
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(DIRECTORY_POLL_S, timeout_s))
    return True


class AsyncDirectoryWatcher:
    """:class:`DirectoryWatcher` on the running event loop: no thread per wait.

    The loop watches the inotify descriptor only while a :meth:`wait` is under way, so a
    busy directory (thousands of writes a second) costs one wake per wait, not one per
    write: changes meanwhile queue in the kernel, and the next :meth:`wait` finds them
    at once. As with the blocking watcher, create it before reading: a change after the
    read makes the next :meth:`wait` return at once. One task waits at a time.
    """

    def __init__(self, *directories: Path) -> None:
        self._watcher = DirectoryWatcher(*directories)
        self._loop = asyncio.get_running_loop()

    async def wait(self, timeout_s: float) -> bool:
        """Until a change since the last wait, or ``timeout_s``; True if something changed."""
        if self._watcher.drain():
            return True
        woken: asyncio.Future[bool] = self._loop.create_future()
        fd = self._watcher.fileno()
        self._loop.add_reader(fd, _settle, woken, True)
        timer = self._loop.call_later(timeout_s, _settle, woken, False)
        try:
            await woken
        finally:
            timer.cancel()
            self._loop.remove_reader(fd)
        return self._watcher.drain()

    def close(self) -> None:
        self._watcher.close()

    def __enter__(self) -> AsyncDirectoryWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)
