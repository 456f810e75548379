"""Waiting for a stream file directory to change (inotify), for low-latency following."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from inotify_simple import INotify, flags

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
        time.sleep(min(0.05, timeout_s))
    return True


class AsyncDirectoryWatcher:
    """:class:`DirectoryWatcher` on the running event loop: no thread per wait.

    The loop watches the inotify descriptor itself, so a change costs one callback
    rather than a hand-over to and from a worker thread. As with the blocking
    watcher, create it before reading: a change after the read makes the next
    :meth:`wait` return at once.
    """

    def __init__(self, *directories: Path) -> None:
        self._watcher = DirectoryWatcher(*directories)
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._watcher.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        self._watcher.drain()
        self._changed.set()

    async def wait(self, timeout_s: float) -> bool:
        """Until a change since the last wait, or ``timeout_s``; True if something changed."""
        if not self._changed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)
        changed = self._changed.is_set()
        self._changed.clear()
        return changed

    def close(self) -> None:
        self._loop.remove_reader(self._watcher.fileno())
        self._watcher.close()

    def __enter__(self) -> AsyncDirectoryWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
