"""Waiting for a stream file directory to change (inotify), for low-latency following."""

from __future__ import annotations

import time
from pathlib import Path

from inotify_simple import INotify, flags

__all__ = ["DirectoryWatcher", "wait_for_directory"]

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
