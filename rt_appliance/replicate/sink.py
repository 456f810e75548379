"""A replica: a byte-identical copy of a stream directory, appended only at its end.

The receiving side of push (a node's ``in/<topic>.<host>``) and of pull (a
subscriber host's copy of the merged log) both write through :class:`ReplicaDir`.
It accepts a chunk only if it starts exactly where the copy ends (or starts the
next file with a matching header) and holds whole, CRC-valid records; anything
else is refused with the reason and nothing is written. Order of operations:
check, write, fsync (per policy), then report the new end, which the caller acks. A
sync that fails cuts the copy back to the end of the last good one: the bytes after
it may be lost on disk whatever the page cache shows, so the sender resends them.

A record larger than a frame arrives in pieces (see
:mod:`rt_appliance.replicate.source`): a chunk may end inside its last record
if that record's header is whole and sane. The piece is written at once (so
memory stays at one frame) but the replica's :attr:`ReplicaDir.end`, what is
synced and acknowledged, stays at the record's start until the last piece
arrives and the CRC, computed piece by piece, matches. Then the record counts.
A chunk that starts at the end instead (the sender reconnected and starts the
record again) first cuts the unfinished piece off.

On open, the last file's torn tail is cut (a crash mid-write) and the end of the
valid data is where the sender must resume. A copy whose last file is corrupt (a
bad record followed by valid ones: a flipped bit, a zeroed block) is repaired the
same way, because it is a copy and its sender still has the original: the damaged
file is first kept whole under ``.damaged/`` for a post-mortem, then cut before
the first bad record, and the sender resends from there
(:attr:`ReplicaDir.repaired` says what was cut). Appending after the damage
instead would hide it, and refusing to open would stop the copy for good. Only if
the damaged file cannot be kept (no room, ``.damaged`` not a directory) does the
copy refuse to open, as corrupt, until an operator moves the file away.

When the sender starts the next file, the one before has ended: the sender reads its
files in order and moves on only once it has sent every whole record of one from where
this copy ends. So each such move is kept (:meth:`ReplicaDir.file_end`): the file's end
as the sender saw it, and where the records of the next one begin. A node's leader
moves its plan on to an input's next file from that alone, with no other node's word
(docs/SEQUENCER.md, "A file's end seen by the leader's push server"); only moves
seen by this process are kept.
"""

from __future__ import annotations

import os
import shutil
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from rt_appliance.errors import CorruptLogError, LogError
from rt_appliance.limits import (
    FILE_ENDS_KEPT,
    MAX_BATCH_MESSAGES,
    MAX_FILE_BYTES,
    MAX_PAYLOAD_BYTES,
)
from rt_appliance.log.format import KIND_MESSAGE, RECORD_HEADER, decode_file_header
from rt_appliance.log.recovery import recover_last_file, verify_file
from rt_appliance.log.scan import Stop, check_record, scan
from rt_appliance.log.segments import DirectoryLock, fsync_dir, list_files
from rt_appliance.log.writer import create_stream_file, write_all
from rt_appliance.position import Position

__all__ = ["DAMAGED_DIR", "FileEnd", "ReplicaDir"]

DAMAGED_DIR = ".damaged"  # copies of damaged files cut on open, kept for a post-mortem


@dataclass(frozen=True, slots=True)
class FileEnd:
    """A file of the copy that the sender moved on from: it ends at ``end`` (an offset),
    and the records of the file it sent next start at ``next_start``."""

    end: int
    next_start: Position


class ReplicaDir:
    """Appends chunks to a copy of a stream directory, which it holds exclusively."""

    def __init__(self, directory: Path, fsync: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.fsync = fsync
        self._lock = DirectoryLock(directory)
        self._fd = -1
        self._partial: _Partial | None = None  # a record arriving in pieces
        self.repaired: CorruptLogError | None = None  # damage cut from the last file on open
        self._ended: dict[tuple[int, int], FileEnd] = {}  # file key -> its end, seen here
        try:
            self._open_last()
        except BaseException:
            self._lock.release()
            raise

    def _open_last(self) -> None:
        """Recover the last file (cut a torn tail, cut and keep damage), open it for
        appending and set :attr:`end` to its valid end."""
        try:
            self.recovery = recover_last_file(self.directory)
        except CorruptLogError as exc:
            try:
                _cut_damage(self.directory, exc)
            except OSError as keep_failed:  # never cut without keeping: refuse instead
                raise CorruptLogError(
                    exc.path, exc.offset, f"{exc.reason}; not repaired: {keep_failed}"
                ) from exc
            self.repaired = exc
            self.recovery = recover_last_file(self.directory)
        files = list_files(self.directory)
        if files:
            last = files[-1]
            valid = verify_file(last.path).valid_bytes
            self.end = Position.of(last.session, last.roll, valid)
            self._fd = os.open(last.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            self._path = last.path
            if self.fsync:  # what a crashed writer left may be in the page cache only
                os.fdatasync(self._fd)
        else:
            self.end = Position.ZERO
        self.synced = self.end  # the end the last successful sync covered

    def _check_unchanged(self) -> None:
        """Raise :class:`CorruptLogError` if the last file's size is not what this copy
        wrote: something else cut or wrote it (a truncation, a restore from backup).
        Appending would then put records at other offsets than the sender's, and every
        reader of the copy would find the wrong bytes at the right positions. The copy is
        recovered again as on open, and the sender resends from its new end."""
        if self._fd < 0:
            return
        expected = self.end.offset + (0 if self._partial is None else self._partial.written)
        size = os.fstat(self._fd).st_size
        if size == expected:
            return
        os.close(self._fd)
        self._fd, self._partial = -1, None
        self._open_last()
        raise CorruptLogError(
            str(self._path),
            min(size, expected),
            f"the copy's last file is {size} bytes but {expected} were written to it: "
            f"changed by something else; recovered again, it ends at {self.end!r} and "
            "the sender resends from there",
        )

    def append(
        self, position: Position, data: bytes | memoryview, sync: bool | None = None
    ) -> Position:
        """Append ``data`` (whole records; at offset 0 a file header first); returns the end.

        ``sync`` (default: the replica's policy) makes it durable before returning;
        a caller that groups syncs passes False and calls :meth:`sync_handle` later.
        """
        self._check_unchanged()
        if self._partial is not None:
            if position == self.end.with_offset(self.end.offset + self._partial.written):
                return self._continue(data)  # not copied: a piece is written as it came
            self._drop_partial()  # the sender starts that record again (or moved on)
        data = bytes(data)
        if position.offset == 0:
            header_bytes = self._start_file(position, data)
        elif position != self.end:
            raise CorruptLogError(
                str(self.directory),
                position.offset,
                f"chunk starts at {position!r} but the replica ends at {self.end!r}",
            )
        else:
            header_bytes = 0
        whole = _check_records(data, header_bytes, self.directory, position)
        partial = None if whole == len(data) else _start_partial(data, whole, position, self)
        if header_bytes:
            self._create(position, data[:header_bytes])
        size = self.end.offset
        write_all(self._fd, memoryview(data)[header_bytes:], self._path, size)
        self.end = Position(self.end + whole - header_bytes)
        if partial is not None:
            self._partial = partial
        return self._maybe_sync(sync)

    def _continue(self, data: bytes | memoryview) -> Position:
        """The next piece of the record being received in pieces."""
        partial = self._partial
        assert partial is not None
        at = self.end.offset + partial.written
        if partial.written + len(data) > partial.size:
            self._drop_partial()
            raise CorruptLogError(
                str(self.directory), at, "a piece runs past the end of the record it continues"
            )
        write_all(self._fd, data, self._path, at)
        partial.written += len(data)
        partial.crc = zlib.crc32(data, partial.crc)
        if partial.written == partial.size:
            self._partial = None
            if partial.crc != partial.expected_crc:
                os.ftruncate(self._fd, self.end.offset)
                raise CorruptLogError(
                    str(self.directory),
                    self.end.offset,
                    f"received record refused: CRC mismatch over its {partial.size} bytes",
                )
            self.end = self.end.with_offset(self.end.offset + partial.size)
        return self._maybe_sync(None)

    def _maybe_sync(self, sync: bool | None) -> Position:
        if self.fsync if sync is None else sync:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                self.cut_unsynced(exc)
            self.synced = self.end
        return self.end

    def _drop_partial(self) -> None:
        """Cut off the pieces of an unfinished record."""
        self._partial = None
        if self._fd >= 0:
            os.ftruncate(self._fd, self.end.offset)

    @property
    def receiving_bytes(self) -> int:
        """Bytes of a record arriving in pieces received so far (0: none in progress)."""
        return 0 if self._partial is None else self._partial.written

    def mark_synced(self, end: Position) -> None:
        """A sync through :meth:`sync_handle` succeeded: everything up to ``end`` is durable."""
        if end.file_key == self.synced.file_key and end.offset > self.synced.offset:
            self.synced = end

    def cut_unsynced(self, exc: OSError) -> NoReturn:
        """A sync failed: the bytes written since the last good sync may not be on disk
        whatever the page cache shows (a later sync would not write them again). Cut them
        off, so the sender sends them again, and raise :class:`LogError` saying so."""
        cut = ""
        self._partial = None  # its pieces are cut with the rest
        if self._fd >= 0 and self.end.file_key == self.synced.file_key:
            try:
                os.ftruncate(self._fd, self.synced.offset)
                os.fdatasync(self._fd)
                self.end = self.synced
                cut = f"; cut back to {self.synced!r}, the sender resends the rest"
            except OSError as again:
                cut = f"; cutting back to {self.synced!r} failed too ({again.strerror})"
        raise LogError(f"{self._path}: sync failed ({exc.strerror}){cut}") from exc

    def sync(self) -> None:
        """Sync the current file now, in this thread (nothing written: nothing to do)."""
        if self._fd >= 0 and self.synced != self.end:
            os.fdatasync(self._fd)
            self.synced = self.end

    def sync_handle(self) -> tuple[int, Position]:
        """A duplicate descriptor of the current file and the end it holds, to sync elsewhere.

        ``fdatasync`` on it (in a worker thread) makes everything up to that end durable:
        earlier files were synced when the next one was created. Close it afterwards.
        """
        return os.dup(self._fd), self.end

    def _start_file(self, position: Position, data: bytes) -> int:
        """Check a chunk that starts a new file; returns its header's size."""
        if self.end != 0 and position.file_key <= self.end.file_key:
            raise CorruptLogError(
                str(self.directory),
                0,
                f"a new file at {position!r} does not follow the replica's end {self.end!r}",
            )
        header = decode_file_header(data)
        if isinstance(header, str):
            raise CorruptLogError(str(self.directory), 0, f"chunk at {position!r}: {header}")
        if (header.session, header.roll) != position.file_key:
            raise CorruptLogError(
                str(self.directory),
                0,
                f"header names log.{header.session}.{header.roll}, chunk is for {position!r}",
            )
        return header.header_bytes

    def file_end(self, key: tuple[int, int]) -> FileEnd | None:
        """How the file ``key`` ended, if this copy saw its sender move on from it."""
        return self._ended.get(key)

    def _create(self, position: Position, header: bytes) -> None:
        if self._fd >= 0:
            if self.fsync:
                try:
                    os.fdatasync(self._fd)
                except OSError as exc:
                    self.cut_unsynced(exc)
            os.close(self._fd)
            self._fd = -1
            # the sender moves on: every whole record of the file is here (synced above)
            if len(self._ended) >= FILE_ENDS_KEPT:
                del self._ended[min(self._ended)]
            self._ended[self.end.file_key] = FileEnd(
                self.end.offset, position.with_offset(len(header))
            )
        self._fd, self._path = create_stream_file(
            self.directory, position.session, position.roll, header
        )
        self.end = Position.of(position.session, position.roll, len(header))
        self.synced = self.end  # the header is synced when the file is made

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._lock.release()


@dataclass(slots=True)
class _Partial:
    """A record arriving in pieces, from the replica's end: ``written`` of ``size`` bytes."""

    size: int
    written: int
    crc: int  # CRC-32 of the bytes after the CRC field received so far
    expected_crc: int


def _check_records(data: bytes, start: int, directory: Path, position: Position) -> int:
    """Check that ``data[start:]`` is valid records (merged-log range records included);
    returns where the whole ones end. Only the last may be unfinished (see
    :func:`_start_partial`)."""
    offset = start
    while offset < len(data):
        result = scan(data, offset, MAX_BATCH_MESSAGES, decode=False)
        if result.stop is Stop.RANGE:  # a valid range record: step over it
            _, end, problem = check_record(data, result.stop_offset)
            if problem:  # a range record is small: it never arrives in pieces
                raise LogError(f"{directory}: chunk at {position!r} ends inside a range record")
            offset = end
            continue
        if result.stop is Stop.BAD:
            where = position.offset + result.stop_offset
            raise CorruptLogError(
                str(directory), where, f"received record refused: {result.reason}"
            )
        if result.stop_offset == offset:
            return offset
        offset = result.stop_offset
    return offset


def _start_partial(data: bytes, at: int, position: Position, replica: ReplicaDir) -> _Partial:
    """The record starting at ``data[at]`` that the chunk ends inside of: its first piece.

    Only a sane header may start one (a message record, within the payload limit, no
    flags), so a chunk that is simply cut short is still refused."""
    head = data[at : at + RECORD_HEADER.size]
    where = position.offset + at
    if len(head) < RECORD_HEADER.size:
        raise LogError(f"{replica.directory}: chunk at {position!r} ends inside a record header")
    crc, length, kind, flags, reserved, _, _ = RECORD_HEADER.unpack(head)
    if kind != KIND_MESSAGE or flags or reserved or length > MAX_PAYLOAD_BYTES:
        raise CorruptLogError(
            str(replica.directory), where, f"received record refused: bad header (kind {kind})"
        )
    size = RECORD_HEADER.size + length
    if where + size > MAX_FILE_BYTES:
        raise CorruptLogError(
            str(replica.directory), where, "received record refused: it would pass 1 GiB"
        )
    piece = memoryview(data)[at:]  # not copied: it may be most of a frame
    return _Partial(size, len(piece), zlib.crc32(piece[4:]), crc)


def _cut_damage(directory: Path, error: CorruptLogError) -> None:
    """Keep the damaged last file under ``.damaged/`` and cut it before the damage."""
    last = list_files(directory)[-1].path
    keep = directory / DAMAGED_DIR
    keep.mkdir(exist_ok=True)
    target = keep / f"{last.name}.{time.time_ns()}"
    shutil.copyfile(last, target)
    with open(target, "rb+") as f:
        os.fsync(f.fileno())
    fsync_dir(keep)
    cut = min(error.offset, last.stat().st_size)
    with open(last, "rb+") as f:
        f.truncate(cut)
        os.fsync(f.fileno())
