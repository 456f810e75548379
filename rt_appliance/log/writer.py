"""The log writer: appends encoded records to ``log.X.Y`` files, rolling and syncing.

Order of operations, which recovery (``docs/RECOVERY.md``) relies on:

1. take the directory lock (one writer per directory);
2. repair the last file's torn tail (:func:`recover_last_file`), reporting the cut;
3. take a new session number (``.session``, fsynced) and create ``log.<session>.0``:
   write the header, fsync the file, fsync the directory;
4. append: ``write`` whole records; on any write error cut the file back to where
   it was, so a failed append leaves no partial record behind;
5. roll when the next records would take the file to ``roll_bytes``: fsync the
   finished file (unless durability is ``never``), then step 3 with roll + 1.

A writer never appends to a file it did not create, so an old session's tail is
never extended.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from rt_appliance.errors import LogError, LogFullError, RecordTooLargeError, UsageError
from rt_appliance.invariants import invariant
from rt_appliance.limits import MAX_ROLL, MAX_ROLL_BYTES, MIN_ROLL_BYTES, OFFSET_BITS, ROLL_BITS
from rt_appliance.log.format import encode_file_header
from rt_appliance.log.recovery import TruncationReport, recover_last_file
from rt_appliance.log.segments import DirectoryLock, StreamFile, fsync_dir, next_session, stream_file
from rt_appliance.position import Position

__all__ = ["LogWriter"]

_SESSION_SHIFT = OFFSET_BITS + ROLL_BITS


class LogWriter:
    """Appends records to a stream file directory it holds exclusively."""

    def __init__(
        self,
        directory: Path,
        *,
        kind: int,
        topic: str,
        host: str,
        roll_bytes: int,
        sync_on_roll: bool = True,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if not MIN_ROLL_BYTES <= roll_bytes <= MAX_ROLL_BYTES:
            raise UsageError(f"roll_bytes must be {MIN_ROLL_BYTES}..{MAX_ROLL_BYTES}, got {roll_bytes}")
        self.directory = directory
        self.roll_bytes = roll_bytes
        self._kind, self._topic, self._host = kind, topic, host
        self._sync_on_roll = sync_on_roll
        self._clock_ns = clock_ns
        self._fd = -1
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogError(f"cannot create {directory}: {exc.strerror}") from exc
        self._lock = DirectoryLock(directory)
        try:
            self.recovery: TruncationReport | None = recover_last_file(directory)
            self.session = next_session(directory)
            self.roll = 0
            self.size = 0
            self._open_file()
        except BaseException:
            self._lock.release()
            raise

    @property
    def current(self) -> StreamFile:
        return stream_file(self.directory, self.session, self.roll)

    @property
    def position(self) -> Position:
        """Where the next record will start (in the current file)."""
        return Position(self._base | self.size)

    def _open_file(self) -> None:
        path = self.current.path
        header = encode_file_header(
            self._kind, self.session, self.roll, self._clock_ns(), self._topic, self._host
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, header, path, 0)
            os.fdatasync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        fsync_dir(self.directory)
        self._fd, self.size, self._path = fd, len(header), path
        self._header_bytes = len(header)
        self._base = (self.session << _SESSION_SHIFT) | (self.roll << OFFSET_BITS)

    def _roll(self) -> None:
        if self.roll >= MAX_ROLL:
            raise LogError(f"{self.directory}: session {self.session} reached {MAX_ROLL} rolls")
        if self._sync_on_roll:
            os.fdatasync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.roll += 1
        self._open_file()

    def append(self, data: bytes, sizes: list[int]) -> Position:
        """Append encoded records (``sizes`` each); returns the last record's position."""
        invariant(sum(sizes) == len(data), "record sizes add up to the data")
        room = self.roll_bytes - self._header_bytes
        if max(sizes) >= room:
            raise RecordTooLargeError(f"a {max(sizes)}-byte record cannot fit in roll_bytes={self.roll_bytes}")
        if self.size + len(data) >= self.roll_bytes:
            return self._append_rolling(data, sizes)
        _write_all(self._fd, data, self._path, self.size)
        self.size += len(data)
        return Position(self._base | (self.size - sizes[-1]))

    def append_one(self, record: bytes) -> Position:
        """Append one encoded record; returns its position. The single-message hot path."""
        size = self.size
        if size + len(record) >= self.roll_bytes:
            return self.append(record, [len(record)])
        try:
            written = os.write(self._fd, record)
        except OSError as exc:
            _write_failed(exc, self._fd, self._path, size)
        if written != len(record):
            _write_all(self._fd, record[written:], self._path, size)
        self.size = size + len(record)
        return Position(self._base | size)

    def _append_rolling(self, data: bytes, sizes: list[int]) -> Position:
        start = 0
        i = 0
        last = Position.ZERO
        while i < len(sizes):
            free = self.roll_bytes - 1 - self.size
            j, taken = i, 0
            while j < len(sizes) and taken + sizes[j] <= free:
                taken += sizes[j]
                j += 1
            if j == i:
                self._roll()
                continue
            _write_all(self._fd, data[start : start + taken], self._path, self.size)
            self.size += taken
            last = Position(self._base | (self.size - sizes[j - 1]))
            start, i = start + taken, j
        return last

    def sync(self) -> None:
        """Make everything appended so far durable (``fdatasync``)."""
        if self._fd >= 0:
            os.fdatasync(self._fd)

    def dup_fd(self) -> int:
        """A duplicate of the current file's descriptor, for syncing from another thread."""
        return os.dup(self._fd)

    def close(self, sync: bool = True) -> None:
        if self._fd >= 0:
            if sync:
                os.fdatasync(self._fd)
            os.close(self._fd)
            self._fd = -1
        self._lock.release()


def _write_all(fd: int, data: bytes, path: Path, size_before: int) -> None:
    """Write all of ``data``; on failure cut the file back to ``size_before`` and raise."""
    try:
        written = os.write(fd, data)
        while written < len(data):  # regular files write short only near ENOSPC or on signals
            written += os.write(fd, memoryview(data)[written:])
    except OSError as exc:
        _write_failed(exc, fd, path, size_before)


def _write_failed(exc: OSError, fd: int, path: Path, size_before: int) -> NoReturn:
    """Cut a partly written file back to ``size_before`` and raise the mapped error."""
    try:
        os.ftruncate(fd, size_before)
    except OSError:
        pass
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise LogFullError(f"{path}: disk full ({exc.strerror}); nothing of this call was kept") from exc
    raise LogError(f"{path}: write failed: {exc.strerror}") from exc
