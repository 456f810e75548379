"""pysyncobj's journal, synced before anything depends on it, with a durable term and vote.

pysyncobj writes its journal through mmap and never syncs it, and keeps the current term
and vote in a meta file it writes without a sync. Here the journal counts its changes,
so the transport can hold back every message until a sync has covered what was written
before it (:mod:`.transport`), and the term and vote go to :class:`.vote.VoteStore`, which
syncs them before pysyncobj goes on (it asks for the save before it sends the vote or
the answer that reflects them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pysyncobj.journal as _journal

from rt_appliance.limits import JOURNAL_FULL_LOG_EVERY_S, JOURNAL_FULL_RETRY_S
from rt_appliance.sequencer.raft.vote import Vote, VoteStore

__all__ = [
    "JOURNALS",
    "ON_FULL",
    "SyncedJournal",
    "allocated_write",
    "create_journal",
    "cut_torn_tail",
    "durable_replace",
    "fsync_and_close",
]

log = logging.getLogger(__name__)

# Called (from the thread that appends, before it waits for room) when a journal cannot
# grow: the node's fitness to lead hears of it (sequencer/fitness.py). The node's event
# loop then waits, so nothing that runs on it can be told.
ON_FULL: list[Callable[[str], None]] = []

_U32, _U64, _ENTRY_HEAD = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<IQQ")
_JOURNAL_MIN_BYTES = 1024  # pysyncobj's initial journal file size
_ZEROS_AT_ONCE = 1 << 20  # the most zeros one write of a journal's growth writes


def _record(command: bytes | str, idx: int, term: int) -> bytes:
    """One journal record as pysyncobj writes it: size, index, term, command, size."""
    data = command.encode() if isinstance(command, str) else bytes(command)
    size = 16 + len(data)
    return _ENTRY_HEAD.pack(size, idx, term) + data + _U32.pack(size)


class SyncedJournal(_journal.FileJournal):  # type: ignore[misc]
    """pysyncobj's file journal that knows what is on disk.

    Every change bumps :attr:`written`; a sync taken at generation G covers every change
    up to G (:attr:`synced`) and every entry up to the raft index that was last then
    (:attr:`synced_index`). A sync can run off raft's thread (:meth:`begin_sync`, then
    the kernel or :meth:`fsync` on a worker thread, then :meth:`end_sync`) while raft
    goes on writing.
    """

    _FileJournal__journalFile: Any  # pysyncobj's ResizableFile, replaced by a compaction

    def __init__(self, path: str) -> None:
        self.path = path
        self.votes = VoteStore(Path(path).parent)
        self.written = 1  # generation of the last change (the file as opened counts)
        self.synced = 0  # generation the last completed sync covered
        self.synced_index = 0  # raft entries up to this index are on disk
        self.cuts = 0  # entries removed (a divergent tail, a compaction) so far
        self.syncs = 0
        self._cut_at: int | None = None  # see deleteEntriesFrom
        with contextlib.suppress(FileNotFoundError):  # a compaction a crash interrupted
            os.unlink(path + ".compacting")
        cut_torn_tail(path)
        super().__init__(path)

    # term and vote: durable before pysyncobj acts on them
    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        self.votes.save(Vote(int(term), votedForNodeId))

    def getCurrentTerm(self) -> int:
        return self.votes.saved.term

    def getVotedForNodeId(self) -> str | None:
        return self.votes.saved.voted_for

    @property
    def dirty(self) -> bool:
        return self.synced < self.written

    def last_index(self) -> int:
        return int(self[-1][1]) if len(self) else 0

    def add(self, command: bytes, idx: int, term: int) -> None:
        if self._cut_at is not None and self._holds(self._cut_at, idx, term):
            self._cut_at += 1  # the leader resends an entry this log already holds
            return
        if self._cut_at is not None and self._cut_at < len(self) and self[self._cut_at][1] == idx:
            self._cut(self._cut_at)  # a conflict: this entry and all after it go
        self._cut_at = None
        super().add(command, idx, term)
        self.written += 1

    def clear(self) -> None:
        self._cut_at = None
        super().clear()
        self.written += 1
        self.cuts += 1
        self.synced_index = 0  # what is added back is not on disk until the next sync

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Remove entries from position ``entryFrom`` on, but only where they conflict.

        pysyncobj calls this for every ``append_entries`` whose previous entry matches and
        then adds the entries the message carries. Removing the tail unconditionally, as
        it would, lets a stale or repeated message (a second answer to an old ``reset``,
        say) shorten a follower's log below entries it has acknowledged and applied: a
        follower that then wins an election would lose committed entries. Raft (section
        5.3 of the paper) removes an entry only when a new one at the same index has
        another term; so here the cut waits for :meth:`add` to find that conflict, and an
        entry the log already holds is kept, as is the tail no message contradicts."""
        self._cut_at = entryFrom

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the entries before position ``entryTo`` (a compaction), all or nothing.

        pysyncobj empties the file and writes the kept entries back through the mapping,
        unsynced: a power loss meanwhile can leave a journal that lost entries this node
        had synced and acknowledged. Here the kept entries go to a new file, synced, that
        replaces the journal (:func:`durable_replace`): after a crash the journal is the
        old one or the new one, and :meth:`keep_from` trims an old one to the snapshot."""
        kept = list(self[entryTo:])
        journal_file = self._FileJournal__journalFile
        header = bytes(journal_file.read(0, _journal.LAST_RECORD_OFFSET_OFFSET))
        records = b"".join(_record(*entry) for entry in kept)
        end = _journal.FIRST_RECORD_OFFSET + len(records)
        body = header + _U32.pack(end) + records
        body += b"\0" * (max(_JOURNAL_MIN_BYTES, 2 * len(body)) - len(body))  # room, allocated
        new = self.path + ".compacting"
        with open(new, "wb") as f:
            f.write(body)
        durable_replace(new, self.path)
        # the old file is replaced: close it without writing its pages back (msync)
        journal_file._ResizableFile__mm.close()
        journal_file._ResizableFile__f.close()
        self._FileJournal__journalFile = _journal.ResizableFile(self.path)
        self._FileJournal__journal = kept
        self._FileJournal__currentOffset = end
        self._cut_at = None
        self.written += 1
        self.cuts += 1
        self.synced = self.written  # the new file was synced whole
        self.synced_index = self.last_index()

    def keep_from(self, idx: int, term: int) -> None:
        """Drop the entries before raft index ``idx`` if the journal holds it with ``term``:
        a snapshot was taken there (its two last entries start the journal after a
        compaction), but a crash came before the journal was compacted. pysyncobj would
        empty such a journal when it loads the snapshot, losing the entries after it."""
        if not len(self) or self[0][1] == idx:
            return
        position = idx - int(self[0][1])
        if 0 < position < len(self) and self[position][2] == term:
            log.warning(
                "raft journal %s: compacting to the snapshot at index %d (a crash came "
                "between the snapshot and the compaction)",
                self.path,
                idx,
            )
            self.deleteEntriesTo(position)

    def _holds(self, position: int, idx: int, term: int) -> bool:
        if position >= len(self):
            return False
        entry = self[position]
        return bool(entry[1] == idx and entry[2] == term)

    def _cut(self, position: int) -> None:
        first = int(self[position][1])
        committed = first <= int(self.getRaftCommitIndex())
        log.log(
            logging.CRITICAL if committed else logging.WARNING,
            "raft journal %s: removing %d entries from index %d that conflict with the leader's%s",
            self.path,
            len(self) - position,
            first,
            " (committed ones among them: raft's safety is broken)" if committed else "",
        )
        super().deleteEntriesFrom(position)
        self.written += 1
        self.cuts += 1
        self.synced_index = min(self.synced_index, self.last_index())

    def begin_sync(self) -> tuple[int, int, int, int]:
        """(generation, last index, cuts, a descriptor of the file to fsync and close).

        The descriptor is the file pysyncobj has open (it reopens it when it grows it),
        opened again: an open file description of its own, not a ``dup``. A failed
        writeback is reported once per open file description, so two syncs running at
        once through duplicates of one could see it once between them, and the other
        report success for pages that never reached the disk; each sees it so."""
        resizable = self._FileJournal__journalFile
        fd = os.open(
            f"/proc/self/fd/{resizable._ResizableFile__f.fileno()}", os.O_RDONLY | os.O_CLOEXEC
        )
        return self.written, self.last_index(), self.cuts, fd

    @staticmethod
    def fsync(fd: int) -> None:
        """:func:`fsync_and_close` (looked up when called, so a test can make it fail)."""
        fsync_and_close(fd)

    def end_sync(self, generation: int, index: int, cuts: int) -> None:
        self.synced = max(self.synced, generation)
        if cuts == self.cuts:  # nothing removed meanwhile: the entries synced are still ours
            self.synced_index = max(self.synced_index, index)
        self.syncs += 1

    def sync(self) -> None:
        """Sync now, in this thread (if anything changed)."""
        if self.dirty:
            generation, index, cuts, fd = self.begin_sync()
            self.fsync(fd)
            self.end_sync(generation, index, cuts)


def cut_torn_tail(path: str) -> int | None:
    """Cut what a crash left of the journal's last entries; returns where it ends now if
    it was cut (None: nothing to cut, or no file).

    pysyncobj writes an entry and then the header's end offset through a mapping, and
    grows the file as it goes; after a power loss the header can name an end the entries
    never reached (a short file, zeros, half an entry), and pysyncobj's loader then fails
    and the node cannot start. What is cut was never synced, so never acknowledged: an
    entry reaches another node or is applied only after a sync covered it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        if len(data) < _journal.FIRST_RECORD_OFFSET:
            return None
        (claimed,) = _U32.unpack_from(data, _journal.LAST_RECORD_OFFSET_OFFSET)
        at, previous = int(_journal.FIRST_RECORD_OFFSET), None
        while at < claimed:
            if at + 4 > len(data):
                break
            (size,) = _U32.unpack_from(data, at)
            end = at + 4 + size + 4
            if size < 16 or end > len(data) or _U32.unpack_from(data, end - 4)[0] != size:
                break
            idx = _U64.unpack_from(data, at + 4)[0]
            if previous is not None and idx != previous + 1:
                break
            previous, at = idx, end
        if at >= claimed:
            return None
        log.warning(
            "raft journal %s: cutting a torn tail (entries end at %d, the header said %d)",
            path,
            at,
            claimed,
        )
        os.pwrite(fd, _U32.pack(at), _journal.LAST_RECORD_OFFSET_OFFSET)
        os.fsync(fd)
        return at
    finally:
        os.close(fd)


def durable_replace(source: str, target: str) -> None:
    """Rename ``source`` over ``target`` so that after a power loss ``target`` holds
    either all of ``source`` or what it held before: ``source``'s bytes are synced
    first, the directory after. pysyncobj renames a snapshot into place with neither,
    which after a power loss can leave an empty snapshot behind a journal it already
    emptied."""
    fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(source, target)
    directory = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def fsync_and_close(fd: int) -> None:
    # fsync alone: on Linux it also writes back pages dirtied through the shared mapping
    # (msync(MS_SYNC) comes down to the same), so one call does both.
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


JOURNALS: dict[str, SyncedJournal] = {}  # by path: the transport finds its node's journal


def create_journal(journal_file: str | None = None) -> Any:
    """pysyncobj's journal factory, replaced (:func:`.patches.install`)."""
    if journal_file is None:
        raise RuntimeError("the sequencer always keeps a journal file")
    journal = SyncedJournal(journal_file)
    JOURNALS[journal_file] = journal
    return journal


def allocated_write(self: Any, offset: int, values: bytes) -> None:
    """``ResizableFile.write`` that allocates the blocks it maps before writing to them.

    pysyncobj grows its journal with ``mmap.resize``, which extends the file without
    allocating it: on a full disk the first store into the new pages kills the process
    with SIGBUS. Here the new size is allocated first, by writing zeros to it; while the
    disk is full the write waits for room, logging it, so the node stalls as if paused
    and goes on when room comes back, losing nothing.

    Zeros rather than ``posix_fallocate``: ext4 allocates the latter as unwritten
    extents, and each sync after a store into one also writes the file system's
    metadata that marks it written (a journal commit, where ext4 keeps a journal), on
    every raft journal sync of a growing journal (at
    5,000 msg/s the p50 was 1-2 ms higher in each of six alternating pairs;
    docs/BENCHMARKS.md, "Batch scheduling"). A doubling writes as many zeros as the
    journal holds, once, and a compaction starts the journal small again."""
    mm = self._ResizableFile__mm
    size = len(values)
    if offset + size > mm.size():
        current = mm.size()
        new = max(int(current * self._ResizableFile__resizeFactor), offset + size)
        _allocate(self._ResizableFile__f.fileno(), current, new, self._ResizableFile__fileName)
        try:
            mm.resize(new)
        except (SystemError, OSError):
            self._ResizableFile__extand(0)  # remap the file as it now is
        mm = self._ResizableFile__mm
    mm[offset : offset + size] = values


def _write_zeros(fd: int, start: int, end: int) -> None:
    """Write zeros from ``start`` up to ``end`` (OSError: ENOSPC on a full disk; what was
    written before stays, beyond the end the journal uses)."""
    zeros = bytes(min(_ZEROS_AT_ONCE, end - start))
    at = start
    while at < end:
        at += os.pwrite(fd, zeros[: end - at], at)


def _allocate(fd: int, start: int, end: int, name: str) -> None:
    logged_at = 0.0
    while True:
        try:
            _write_zeros(fd, start, end)
            if logged_at:
                log.warning("raft journal %s: room again, going on", name)
            return
        except OSError as exc:
            for hook in ON_FULL:
                hook(f"{name}: cannot grow to {end} bytes: {exc.strerror}")
            now = time.monotonic()
            if now - logged_at >= JOURNAL_FULL_LOG_EVERY_S:
                log.error(
                    "raft journal %s: cannot grow to %d bytes (%s); raft waits for room",
                    name,
                    end,
                    exc,
                )
                logged_at = now
            time.sleep(JOURNAL_FULL_RETRY_S)
