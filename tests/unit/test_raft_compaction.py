"""Compaction of the raft journal: when a node asks for it, and that it never loses an
entry the node had synced (a crash between the snapshot and the compaction included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.raft.compaction import CompactionPolicy
from rt_appliance.sequencer.raft.journal import SyncedJournal
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.unit


def test_the_nodes_thresholds_are_staggered_by_their_place() -> None:
    nodes = ["rt-3", "rt-1", "rt-2"]
    policies = {n: CompactionPolicy.for_node(3000, 600, n, nodes) for n in nodes}
    assert [policies[n].threshold for n in ("rt-1", "rt-2", "rt-3")] == [3000, 4000, 5000]
    assert {p.cap for p in policies.values()} == {12_000}


def test_due_by_length_by_time_and_held_for_a_follower_behind() -> None:
    policy = CompactionPolicy(threshold=1000, cap=4000, min_s=600)
    assert not policy.due(999, 10, follower_behind=False)
    assert policy.due(1000, 10, follower_behind=False)
    assert policy.due(3, 600, follower_behind=False)  # a quiet stream, after min_s
    assert not policy.due(2, 10_000, follower_behind=False)  # nothing pysyncobj would drop
    # a leader keeps the entries a follower still needs, up to the cap
    assert not policy.due(3999, 10_000, follower_behind=True)
    assert policy.due(4000, 10, follower_behind=True)


def _entries(journal: SyncedJournal) -> list[tuple[bytes, int, int]]:
    return [tuple(journal[i]) for i in range(len(journal))]  # type: ignore[misc]


def test_a_compaction_replaces_the_journal_whole_and_synced(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = SyncedJournal(str(path))
    for idx in range(1, 11):
        journal.add(b"entry %d" % idx, idx, 1)
    journal.sync()
    journal.deleteEntriesTo(4)  # pysyncobj: keep from position 4 (index 5) on
    assert _entries(journal)[0] == (b"entry 5", 5, 1) and journal.last_index() == 10
    assert not journal.dirty and journal.synced_index == 10  # the new file was synced
    journal.add(b"entry 11", 11, 2)  # and it goes on in the new file
    journal.sync()
    journal._destroy()
    (tmp_path / "raft.journal.compacting").write_bytes(b"half written")  # a crash's leftover
    again = SyncedJournal(str(path))
    try:
        assert [e[1] for e in _entries(again)] == list(range(5, 12))
        assert _entries(again)[-1] == (b"entry 11", 11, 2)
        assert not (tmp_path / "raft.journal.compacting").exists()
    finally:
        again._destroy()


def test_keep_from_trims_only_a_journal_that_holds_the_snapshots_entry(tmp_path: Path) -> None:
    journal = SyncedJournal(str(tmp_path / "raft.journal"))
    try:
        for idx in range(1, 11):
            journal.add(b"entry %d" % idx, idx, 1)
        journal.keep_from(5, 2)  # another term at index 5: not this snapshot's history
        assert journal.last_index() == 10 and _entries(journal)[0][1] == 1
        journal.keep_from(5, 1)
        assert [e[1] for e in _entries(journal)] == list(range(5, 11))
        journal.keep_from(5, 1)  # already there: nothing to do
        assert len(journal) == 6
    finally:
        journal._destroy()


def test_a_crash_between_the_snapshot_and_the_compaction_loses_no_entry(tmp_path: Path) -> None:
    """The snapshot was put in place at index 6, then the node died before its journal
    was compacted: pysyncobj alone would empty the journal on load and keep only the
    snapshot's two entries, so the entries 7..10 this node had synced would be gone."""
    config = load_config(write_local_config(tmp_path, nodes=1))
    raft = tmp_path / "raft"
    raft.mkdir()
    journal = SyncedJournal(str(raft / "raft.journal"))
    for idx in range(1, 11):
        journal.add(b"entry %d" % idx, idx, 1)
    journal.sync()
    journal._destroy()
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    snapshot = {
        "format": 1,
        "state": machine.snapshot(),
        "entries": [["ZW50cnkgNg==", 6, 1], ["ZW50cnkgNQ==", 5, 1]],  # entry 6, entry 5
    }
    (raft / "raft.snapshot").write_text(json.dumps(snapshot))

    node = RaftNode(config, "rt-1", raft, machine)
    try:
        node._tick()  # pysyncobj loads the snapshot in its first tick
        loaded = node._link.journal()
        assert loaded is not None
        assert [e[1] for e in _entries(loaded)] == list(range(5, 11))
        assert node.status().last_applied >= 6
    finally:
        node.destroy()
