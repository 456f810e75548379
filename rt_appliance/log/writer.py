"""The log writer: appends encoded records to ``log.X.Y`` files, rolling and syncing.

Order of operations, which recovery (``docs/RECOVERY.md``) relies on:

1. take the directory lock (one writer per directory);
2. repair the last file's torn tail (:func:`recover_last_file`), reporting the cut;
3. take a new session number (``.session``, fsynced) and create ``log.<session>.0``:
   write the header to a hidden temporary name, fsync it, rename it into place and
   fsync the directory, so a reader never sees a stream file without its header;
4. append: ``write`` whole records; on any write error cut every file the call
   touched back to where it was, so a failed append leaves nothing of itself;
5. roll when the next records would take the file to ``roll_bytes``: create the
   next file (step 3 with roll + 1), then fsync the finished file (unless
   durability is ``never``) and close it.

A writer never appends to a file it did not create, so an old session's tail is
never extended.
"""

from __future__ import annotations

import contextlib
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
from rt_appliance.log.naming import file_name
from rt_appliance.log.recovery import TruncationReport, recover_last_file, remove_temporary_files
from rt_appliance.log.segments import (
    TEMPORARY_SUFFIX,
    DirectoryLock,
    StreamFile,
    fsync_dir,
    next_session,
    stream_file,
)
from rt_appliance.position import Position

__all__ = ["LogWriter", "create_stream_file", "write_all"]

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
            raise UsageError(
                f"roll_bytes must be {MIN_ROLL_BYTES}..{MAX_ROLL_BYTES}, got {roll_bytes}"
            )
        self.directory = directory
        self.roll_bytes = roll_bytes
        self._kind, self._topic, self._host = kind, topic, host
        self._sync_on_roll = sync_on_roll
        self._unsynced_rolled: list[Path] = []  # rolled without a sync: sync() still owes them
        self._clock_ns = clock_ns
        self._fd = -1
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock = DirectoryLock(directory)
        except OSError as exc:
            raise LogError(f"cannot open {directory}: {exc.strerror}") from exc
        try:
            remove_temporary_files(directory)
            self.recovery: TruncationReport | None = recover_last_file(directory)
            removed = self.recovery.removed_session if self.recovery is not None else 0
            self.session = next_session(directory, removed)
            self.roll = 0
            self._fd, self._path, self.size = self._create(self.session, 0)
        except OSError as exc:
            self._lock.release()
            raise LogError(f"cannot start a writer in {directory}: {exc.strerror}") from exc
        except BaseException:
            self._lock.release()
            raise
        self._header_bytes = self.size
        self._base = (self.session << _SESSION_SHIFT) | (self.roll << OFFSET_BITS)

    @property
    def current(self) -> StreamFile:
        return stream_file(self.directory, self.session, self.roll)

    @property
    def position(self) -> Position:
        """Where the next record will start (in the current file)."""
        return Position(self._base | self.size)

    def bytes_needed(self, sizes: list[int]) -> int:
        """Bytes that appending records of ``sizes`` adds to the directory, new headers included.

        Raises :class:`RecordTooLargeError` for a record that cannot fit in any file.
        """
        room = self.roll_bytes - self._header_bytes
        largest = max(sizes)
        if largest >= room:
            raise RecordTooLargeError(
                f"a {largest}-byte record cannot fit in roll_bytes={self.roll_bytes}"
            )
        total = sum(sizes)
        if self.size + total < self.roll_bytes:
            return total
        size = self.size
        for s in sizes:  # the same packing as _append_rolling
            if size + s >= self.roll_bytes:
                size = self._header_bytes
                total += self._header_bytes
            size += s
        return total

    def _create(self, session: int, roll: int) -> tuple[int, Path, int]:
        """Create ``log.<session>.<roll>`` with its header; returns (fd, path, size)."""
        header = encode_file_header(
            self._kind, session, roll, self._clock_ns(), self._topic, self._host
        )
        fd, path = create_stream_file(self.directory, session, roll, header)
        return fd, path, len(header)

    def _roll(self) -> None:
        """Start the next file; the finished one is synced (per policy) and closed."""
        if self.roll >= MAX_ROLL:
            raise LogError(f"{self.directory}: session {self.session} reached {MAX_ROLL} rolls")
        fd, path, size = self._create(self.session, self.roll + 1)
        old, old_path = self._fd, self._path
        self._fd, self._path, self.size = fd, path, size
        self.roll += 1
        self._base = (self.session << _SESSION_SHIFT) | (self.roll << OFFSET_BITS)
        try:
            if self._sync_on_roll:
                os.fdatasync(old)
            else:
                self._unsynced_rolled.append(old_path)
        except OSError as exc:
            _raise_mapped(exc, old_path, "cannot sync")
        finally:
            os.close(old)

    def append(self, data: bytes, sizes: list[int]) -> Position:
        """Append encoded records (``sizes`` each); returns the last record's position.

        Either every record is appended or, on an error, none is.
        """
        invariant(sum(sizes) == len(data), "record sizes add up to the data")
        self.bytes_needed(sizes)  # raises for a record that can never fit
        if self.size + len(data) >= self.roll_bytes:
            return self._append_rolling(data, sizes)
        write_all(self._fd, data, self._path, self.size)
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
            write_all(self._fd, record[written:], self._path, size)
        self.size = size + len(record)
        return Position(self._base | size)

    def _append_rolling(self, data: bytes, sizes: list[int]) -> Position:
        touched = [(self._path, self.size)]  # every file this call writes, and its size before
        start = 0
        i = 0
        last = Position.ZERO
        try:
            while i < len(sizes):
                free = self.roll_bytes - 1 - self.size
                j, taken = i, 0
                while j < len(sizes) and taken + sizes[j] <= free:
                    taken += sizes[j]
                    j += 1
                if j == i:
                    self._roll()
                    touched.append((self._path, self.size))
                    continue
                write_all(self._fd, data[start : start + taken], self._path, self.size)
                self.size += taken
                last = Position(self._base | (self.size - sizes[j - 1]))
                start, i = start + taken, j
        except BaseException:
            for path, size in touched:  # finished files stay finished, but without this call
                with contextlib.suppress(OSError):
                    os.truncate(path, size)
            self.size = dict(touched).get(self._path, self._header_bytes)
            raise
        return last

    def sync(self) -> None:
        """Make everything appended so far durable (``fdatasync``), rolled files included."""
        while self._unsynced_rolled:
            path = self._unsynced_rolled[0]
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # deleted (replicated or dropped): nothing to keep
                fd = -1
            except OSError as exc:
                _raise_mapped(exc, path, "cannot sync")
            if fd >= 0:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    _raise_mapped(exc, path, "cannot sync")
                finally:
                    os.close(fd)
            self._unsynced_rolled.pop(0)
        if self._fd >= 0:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                _raise_mapped(exc, self._path, "cannot sync")

    def dup_fd(self) -> int:
        """A duplicate of the current file's descriptor, for syncing from another thread."""
        return os.dup(self._fd)

    def close(self, sync: bool = True) -> None:
        try:
            if sync:
                self.sync()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._lock.release()


def create_stream_file(directory: Path, session: int, roll: int, header: bytes) -> tuple[int, Path]:
    """Create ``log.<session>.<roll>`` holding ``header``; returns an append fd and the path.

    The file is written under a hidden name, synced, renamed into place and the
    directory synced, so no reader ever opens a file without a complete header.
    """
    name = file_name(session, roll)
    final = directory / name
    temporary = directory / f".{name}{TEMPORARY_SUFFIX}"
    if final.exists():  # sessions are never reused: an existing file is a bug elsewhere
        raise LogError(f"{final} already exists; refusing to overwrite it")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o644)
    except OSError as exc:
        _raise_mapped(exc, final, "cannot create")
    try:
        write_all(fd, header, temporary, 0)
        os.fdatasync(fd)
        os.rename(temporary, final)
        fsync_dir(directory)
    except BaseException as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            _raise_mapped(exc, final, "cannot create")
        raise
    return fd, final


def write_all(fd: int, data: bytes | memoryview, path: Path, size_before: int) -> None:
    """Write all of ``data``; on failure cut the file back to ``size_before`` and raise."""
    try:
        written = os.write(fd, data)
        while written < len(data):  # regular files write short only near ENOSPC or on signals
            written += os.write(fd, memoryview(data)[written:])
    except OSError as exc:
        _write_failed(exc, fd, path, size_before)


def _write_failed(exc: OSError, fd: int, path: Path, size_before: int) -> NoReturn:
    """Cut a partly written file back to ``size_before`` and raise the mapped error."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size_before)
    _raise_mapped(exc, path, "write failed, nothing of this call was kept")


def _raise_mapped(exc: OSError, path: Path, what: str) -> NoReturn:
    """Raise the :class:`LogError` for an ``OSError`` met while writing ``path``."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise LogFullError(f"{path}: disk full ({exc.strerror}); {what}") from exc
    raise LogError(f"{path}: {what}: {exc.strerror}") from exc
