"""The raft journal knows which entries a sync has put on disk, also while raft goes on."""

from __future__ import annotations

import os
from pathlib import Path

from rt_appliance.sequencer.raft import _fsync_and_close, _SyncedJournal


def test_a_sync_covers_what_was_written_before_it_began(tmp_path: Path) -> None:
    journal = _SyncedJournal(str(tmp_path / "raft.journal"))
    try:
        assert journal.dirty and journal.synced_index == 0
        journal.add(b"a", 1, 1)
        journal.add(b"b", 2, 1)
        generation, index, cuts, fd = journal.begin_sync()
        assert index == 2
        journal.add(b"c", 3, 1)  # written while the sync runs (in a worker thread)
        _fsync_and_close(fd)
        journal.end_sync(generation, index, cuts)
        assert journal.synced_index == 2  # not 3: it came after the sync began
        assert journal.dirty and journal.synced == generation < journal.written
        journal.sync()
        assert not journal.dirty and journal.synced_index == 3
        journal.sync()  # nothing changed: no sync
        assert journal.syncs == 2
    finally:
        journal._destroy()


def test_removed_entries_are_not_counted_as_synced(tmp_path: Path) -> None:
    journal = _SyncedJournal(str(tmp_path / "raft.journal"))
    try:
        for idx in range(1, 6):
            journal.add(b"x", idx, 1)
        journal.sync()
        assert journal.synced_index == 5
        generation, index, cuts, fd = journal.begin_sync()
        journal.deleteEntriesFrom(3)  # a divergent tail: entries 4 and 5 go
        assert journal.synced_index == 3 and journal.last_index() == 3
        journal.add(b"new leader's 4", 4, 2)
        _fsync_and_close(fd)
        journal.end_sync(generation, index, cuts)  # began before the cut: proves nothing new
        assert journal.synced_index == 3
        journal.sync()
        assert journal.synced_index == 4
        journal.clear()  # compaction rewrites what it keeps: on disk only after a sync
        journal.add(b"kept", 4, 2)
        assert journal.synced_index == 0 and journal.dirty
        journal.sync()
        assert journal.synced_index == 4
    finally:
        journal._destroy()


def test_the_descriptor_given_to_a_sync_is_its_own(tmp_path: Path) -> None:
    journal = _SyncedJournal(str(tmp_path / "raft.journal"))
    try:
        *_, fd = journal.begin_sync()
        os.fstat(fd)
        _fsync_and_close(fd)  # closing it leaves the journal's own file open
        journal.add(b"a", 1, 1)
        journal.sync()
        assert journal.synced_index == 1
    finally:
        journal._destroy()
