"""A restarting node replays its raft journal a batch a tick, after the snapshot is loaded,
so that raft answers its peers meanwhile instead of after the whole journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.limits import RAFT_APPLY_BATCH
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.raft.codec import UNDECODABLE, dumps
from rt_appliance.sequencer.raft.journal import SyncedJournal
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.unit

ENTRIES = 3 * RAFT_APPLY_BATCH + 10


def test_a_restart_applies_its_journal_a_batch_a_tick(tmp_path: Path) -> None:
    config = load_config(write_local_config(tmp_path, nodes=1))
    first = RaftNode(config, "rt-1", tmp_path / "first", SequencerMachine(config.stream, 1 << 20))
    apply_id = UNDECODABLE[0][0]  # how pysyncobj names the node's apply in its entries
    first.destroy()
    raft = tmp_path / "raft"
    raft.mkdir()
    journal = SyncedJournal(str(raft / "raft.journal"))
    for idx in range(1, ENTRIES + 1):  # prunes of nothing: each applied (and rejected)
        prune = b'{"t":"prune","below":%d,"reason":"x","ts":1}' % idx
        journal.add(b"\x00" + dumps((apply_id, (prune,))), idx, 1)  # 0: a regular command
    journal.sync()
    journal.setRaftCommitIndex(ENTRIES)
    journal.onOneSecondTimer()  # pysyncobj keeps the commit index in its meta file
    journal._destroy()

    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    node = RaftNode(config, "rt-1", raft, machine)
    try:
        node._tick()  # the first tick loads the snapshot (none here) and applies nothing
        assert machine.state.rejected == 0
        node._tick()
        assert machine.state.rejected == RAFT_APPLY_BATCH and node.replaying
        assert node.status().commit_index == ENTRIES  # raft's own view is not held back
        for _ in range(3):
            node._tick()
        assert machine.state.rejected == ENTRIES - 1  # pysyncobj starts applied at 1
        assert not node.replaying
    finally:
        node.destroy()
