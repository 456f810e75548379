"""The raft journal knows which entries a sync has put on disk, also while raft goes on."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rt_appliance.sequencer.raft.journal import SyncedJournal, fsync_and_close


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[SyncedJournal]:
    opened = SyncedJournal(str(tmp_path / "raft.journal"))
    try:
        yield opened
    finally:
        opened._destroy()


def _sync_while(journal: SyncedJournal, meanwhile: Callable[[], None]) -> int:
    """A sync as raft runs it in a worker thread, with ``meanwhile`` done between its
    start and its end; returns the raft index it began at."""
    generation, index, cuts, fd = journal.begin_sync()
    meanwhile()
    fsync_and_close(fd)
    journal.end_sync(generation, index, cuts)
    return index


def test_a_sync_covers_what_was_written_before_it_began(journal: SyncedJournal) -> None:
    assert journal.dirty and journal.synced_index == 0
    journal.add(b"a", 1, 1)
    journal.add(b"b", 2, 1)
    before = journal.written
    # entry 3 is written while the sync runs (in a worker thread)
    assert _sync_while(journal, lambda: journal.add(b"c", 3, 1)) == 2
    assert journal.synced_index == 2  # not 3: it came after the sync began
    assert journal.dirty and journal.synced == before < journal.written
    journal.sync()
    assert not journal.dirty and journal.synced_index == 3
    journal.sync()  # nothing changed: no sync
    assert journal.syncs == 2


def test_removed_entries_are_not_counted_as_synced(journal: SyncedJournal) -> None:
    for idx in range(1, 6):
        journal.add(b"x", idx, 1)
    journal.sync()
    assert journal.synced_index == 5

    def cut_and_rewrite() -> None:  # a divergent tail: entries 4 and 5 go
        journal.deleteEntriesFrom(3)  # the cut waits for the entry that conflicts
        assert journal.synced_index == 5 and journal.last_index() == 5
        journal.add(b"new leader's 4", 4, 2)
        assert journal.synced_index == 3 and journal.last_index() == 4

    _sync_while(journal, cut_and_rewrite)  # began before the cut: proves nothing new
    assert journal.synced_index == 3
    journal.sync()
    assert journal.synced_index == 4
    journal.clear()  # compaction rewrites what it keeps: on disk only after a sync
    journal.add(b"kept", 4, 2)
    assert journal.synced_index == 0 and journal.dirty
    journal.sync()
    assert journal.synced_index == 4


def test_the_descriptor_given_to_a_sync_is_its_own(journal: SyncedJournal) -> None:
    *_, fd = journal.begin_sync()
    os.fstat(fd)
    fsync_and_close(fd)  # closing it leaves the journal's own file open
    journal.add(b"a", 1, 1)
    journal.sync()
    assert journal.synced_index == 1


@pytest.mark.parametrize("damage", ["short file", "zeros", "half an entry"])
def test_a_torn_tail_is_cut_and_the_journal_opens(tmp_path: Path, damage: str) -> None:
    """After a power loss the header can name an end the entries never reached; pysyncobj
    alone fails to load such a journal and the node cannot start (seen in `rt chaos`)."""
    path = tmp_path / "raft.journal"
    first = SyncedJournal(str(path))
    for idx in range(1, 6):
        first.add(b"entry %d" % idx, idx, 1)
    first.sync()
    first._destroy()
    data = bytearray(path.read_bytes())
    ends = []  # where each entry ends
    at = 40
    for _ in range(5):
        size = int.from_bytes(data[at : at + 4], "little")
        at += size + 8
        ends.append(at)
    if damage == "short file":
        data = data[: ends[2] + 10]  # the file lost the 4th entry and after; the header not
    elif damage == "zeros":
        data[ends[2] : ends[4]] = bytes(ends[4] - ends[2])
    else:
        data[ends[3] - 4 : ends[4]] = bytes(ends[4] - ends[3] + 4)  # the 4th entry's end too
    path.write_bytes(bytes(data))

    again = SyncedJournal(str(path))
    try:
        kept = 3
        assert [again[i][1] for i in range(len(again))] == list(range(1, kept + 1))
        assert again[kept - 1][0] == b"entry %d" % kept
        again.add(b"new", kept + 1, 2)  # and it goes on from there
        assert again[-1][1] == kept + 1
    finally:
        again._destroy()


def test_each_sync_has_an_open_file_description_of_its_own(journal: SyncedJournal) -> None:
    """Two syncs at once must each hear of a failed writeback: it is reported once per
    open file description, so neither may be a duplicate of the other's (or of
    pysyncobj's own descriptor)."""
    journal.add(b"a", 1, 1)
    own = journal._FileJournal__journalFile._ResizableFile__f.fileno()
    own_at = os.lseek(own, 0, os.SEEK_CUR)
    first = journal.begin_sync()[3]
    second = journal.begin_sync()[3]
    try:
        assert os.fstat(first).st_ino == os.fstat(second).st_ino == os.fstat(own).st_ino
        moved_to = own_at + 7
        os.lseek(first, moved_to, os.SEEK_SET)  # a shared description would move for all
        assert os.lseek(second, 0, os.SEEK_CUR) == 0
        assert os.lseek(own, 0, os.SEEK_CUR) == own_at
    finally:
        fsync_and_close(first)
        fsync_and_close(second)
