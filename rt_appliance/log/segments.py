"""A stream file directory on disk: its files in order, its writer lock, its session counter.

Layout of a directory::

    log.1.0 log.1.1 log.2.0 ...   stream files, read in (session, roll) order
    .log.2.1.new                  a file whose header is being written (renamed when done)
    .lock                         flock()ed by the one writer; holds its pid
    .session                      the last session number handed out (decimal)

``.session`` survives the deletion of every stream file (replicated files are
deleted, ``drop_oldest`` deletes), so a session number, and with it a position, is
never reused in a directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from rt_appliance.clock import wall_ns
from rt_appliance.errors import LogError, LogLockedError, RTError
from rt_appliance.limits import LISTING_SETTLE_NS, LOCK_HOLDER_BYTES, MAX_SESSION
from rt_appliance.log.naming import file_name, parse_file_name

log = logging.getLogger(__name__)

__all__ = [
    "TEMPORARY_SUFFIX",
    "DirectoryLock",
    "ListingCache",
    "StreamFile",
    "bytes_after",
    "fsync_dir",
    "last_session",
    "list_files",
    "next_session",
    "stream_file",
    "temporary_files",
    "total_bytes",
]

LOCK_NAME = ".lock"
SESSION_NAME = ".session"
TEMPORARY_SUFFIX = ".new"


@dataclass(frozen=True, slots=True, order=True)
class StreamFile:
    """One ``log.X.Y`` file; orders by (session, roll)."""

    session: int
    roll: int
    path: Path

    @property
    def key(self) -> tuple[int, int]:
        return (self.session, self.roll)


def list_files(directory: Path) -> list[StreamFile]:
    """The stream files of ``directory`` in log order; other names are ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    files = []
    for name in names:
        key = parse_file_name(name)
        if key is not None:
            files.append(StreamFile(key[0], key[1], directory / name))
    files.sort()
    return files


T = TypeVar("T")


class ListingCache(Generic[T]):
    """``read(directory)``, read again only when the directory's entries may have changed.

    One ``stat`` of the directory replaces listing and parsing it: a new, renamed or
    deleted entry changes the directory's mtime, but only in clock ticks: an entry created
    in the same tick as a listing leaves it unchanged, so a listing is trusted only once
    the mtime it was taken at is older than ``LISTING_SETTLE_NS``. The result is shared:
    do not change it. Safe to call from several threads: the key and its listing are kept
    as one tuple.
    """

    def __init__(self, directory: Path, read: Callable[[Path], T]) -> None:
        self.directory, self._read = directory, read
        # ((inode, mtime_ns), listing) of the last listing that can be trusted
        self._trusted: tuple[tuple[int, int], T] | None = None

    def get(self) -> T:
        try:
            st = os.stat(self.directory)
        except FileNotFoundError:
            self._trusted = None
            return self._read(self.directory)
        key = (st.st_ino, st.st_mtime_ns)
        trusted = self._trusted
        if trusted is not None and trusted[0] == key:
            return trusted[1]
        value = self._read(self.directory)
        settled = wall_ns() - st.st_mtime_ns > LISTING_SETTLE_NS
        self._trusted = (key, value) if settled else None
        return value


def temporary_files(directory: Path) -> list[Path]:
    """Files a writer was creating (``.log.X.Y.new``) when it stopped."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [
        directory / name
        for name in names
        if name.startswith(".")
        and name.endswith(TEMPORARY_SUFFIX)
        and parse_file_name(name[1 : -len(TEMPORARY_SUFFIX)]) is not None
    ]


def total_bytes(files: list[StreamFile]) -> int:
    """Sum of the sizes of ``files`` that still exist."""
    size = 0
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            size += f.path.stat().st_size
    return size


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def last_session(directory: Path) -> int:
    """The highest session number used in ``directory`` (``.session`` or a file), or 0."""
    last = 0
    counter = directory / SESSION_NAME
    try:
        last = int(counter.read_text().strip() or 0)
    except FileNotFoundError:
        pass
    except ValueError as exc:
        raise LogError(f"{counter}: not a session number; fix or delete it") from exc
    files = list_files(directory)
    if files:
        last = max(last, files[-1].session)
    return last


def next_session(directory: Path, used: int = 0) -> int:
    """Hand out a session number never used in ``directory`` and record it durably.

    ``used`` is a session known to be taken even if no file shows it any more
    (one whose only file recovery just removed).
    """
    session = max(used, last_session(directory)) + 1
    if session > MAX_SESSION:
        raise LogError(f"{directory}: all {MAX_SESSION} session numbers are used")
    counter = directory / SESSION_NAME
    tmp = directory / (SESSION_NAME + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{session}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, counter)
    fsync_dir(directory)
    return session


class DirectoryLock:
    """A single-holder lock of a directory (``flock`` on ``.lock``: the one writer).

    The kernel drops the lock when the process dies, so a crashed holder never
    leaves a stale lock behind. ``name`` and ``role`` make other locks of the same
    kind (the one sender of a publisher directory: ``.send.lock``).
    """

    def __init__(
        self,
        directory: Path,
        name: str = LOCK_NAME,
        role: str = "writer",
        error: type[RTError] = LogLockedError,
    ) -> None:
        self.path = directory / name
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = (
                os.pread(self._fd, LOCK_HOLDER_BYTES, 0).decode(errors="replace").strip()
                or "unknown"
            )
            os.close(self._fd)
            raise error(
                f"{directory} already has a {role} (pid {holder}); one {role} per directory"
            ) from exc
        os.ftruncate(self._fd, 0)
        try:  # the pid is for people reading the file: the flock is the lock
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full disk: go on holding the lock, without the note
            log.warning("%s: cannot write our pid into it (%s); the lock holds", self.path, exc)

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def stream_file(directory: Path, session: int, roll: int) -> StreamFile:
    return StreamFile(session, roll, directory / file_name(session, roll))


def bytes_after(directory: Path, session: int, roll: int, offset: int) -> int:
    """Bytes of ``directory``'s stream files after ``offset`` in ``log.<session>.<roll>``.

    What a copy that ends there still lacks (a replication lag). A position before
    every file counts every file in full.
    """
    total = 0
    for f in list_files(directory):
        if f.key < (session, roll):
            continue
        try:
            size = f.path.stat().st_size
        except FileNotFoundError:
            continue
        total += size - offset if f.key == (session, roll) else size
    return max(total, 0)
