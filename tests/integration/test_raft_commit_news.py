"""A leader tells its followers of a commit before it applies it, and never syncs its
journal on raft's loop to apply.

Three real raft nodes (pysyncobj over mutual TLS on loopback, synced journals) on one
event loop. When a follower's answer moves the leader's commit index, the message
carrying the new commit index leaves before the leader's own state machine applies the
entries: the followers apply (and their subscribers read) alongside the leader, not a
merge later. An entry the leader's journal sync has not covered yet waits for the sync
already running in its worker thread; the apply never syncs the journal again on the
loop, which would hold raft's heartbeats and answers up for a sync.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from rt_appliance.sequencer.raft.journal import SyncedJournal
from tests.helpers import raft_cluster, run_rafts, settled_leader, watch_raft_sends

pytestmark = pytest.mark.integration

PROPOSALS = 5
ROUNDS = 20


def test_commit_news_leaves_before_the_leader_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config, machines, nodes = raft_cluster(tmp_path)
    events: list[tuple[str, str, int]] = []  # (what, node, raft index), in order
    watching: list[bool] = []

    def seen(sender: str, to: str, message: dict[str, Any]) -> None:
        if watching and message.get("type") == "append_entries" and "commit_index" in message:
            events.append(("news", sender, int(message["commit_index"])))

    watch_raft_sends(monkeypatch, nodes, seen)
    loop_syncs: list[str] = []
    real_sync = SyncedJournal.sync

    def counted_sync(journal: SyncedJournal) -> None:
        if watching and journal.dirty:
            loop_syncs.append("sync")
        real_sync(journal)

    monkeypatch.setattr(SyncedJournal, "sync", counted_sync)
    for name in nodes:
        machine = machines[name]
        real_apply = machine.apply

        def applying(command: bytes, name: str = name, real: Any = real_apply) -> bool:
            if watching:
                obj = nodes[name]._obj
                events.append(("apply", name, obj._SyncObj__raftLastApplied + 1))
            return bool(real(command))

        monkeypatch.setattr(machine, "apply", applying)

    leader_name: list[str] = []
    targets: list[int] = []

    async def scenario() -> None:
        deadline = time.monotonic() + 30
        leader = await settled_leader(nodes, deadline)
        leader_name.append(leader.name)
        watching.append(True)
        for round_ in range(ROUNDS):
            base = leader._obj._SyncObj__getCurrentLogIndex()
            targets.append(base + PROPOSALS)
            for i in range(PROPOSALS):  # in one turn: no await between them
                below = round_ * PROPOSALS + i + 1
                command = b'{"t":"prune","below":%d,"reason":"x","ts":1}' % below
                leader.propose(command, lambda ok, why: None)
            while any(
                m.state.rejected + m.state.prunes < (round_ + 1) * PROPOSALS
                for m in machines.values()
            ):
                assert time.monotonic() < deadline, "the proposals were not applied everywhere"
                await asyncio.sleep(0.001)

    run_rafts(nodes, scenario)

    states = [m.state.to_json() for m in machines.values()]
    assert all(state == states[0] for state in states)
    leader = leader_name[0]
    for target in targets:
        applied_at = next(
            i for i, e in enumerate(events) if e[:2] == ("apply", leader) and e[2] == target
        )
        told_at = [i for i, e in enumerate(events) if e[:2] == ("news", leader) and e[2] >= target]
        assert told_at, f"the leader never sent a commit index covering {target}"
        assert told_at[0] < applied_at, (
            f"entry {target}: the leader applied it before telling its followers"
        )
    assert not loop_syncs, f"journals synced on raft's loop to apply: {len(loop_syncs)}"


def test_a_proposal_leaves_as_soon_as_it_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner has raft send what it proposed at once (``RaftNode.send_proposals``):
    the entries are on their way to the followers before the loop runs anything else."""
    _config, machines, nodes = raft_cluster(tmp_path)
    sent: list[tuple[str, int]] = []  # (to, entries)
    watching: list[bool] = []

    def seen(sender: str, to: str, message: dict[str, Any]) -> None:
        if watching and message.get("type") == "append_entries" and message.get("entries"):
            sent.append((to, len(message["entries"])))

    watch_raft_sends(monkeypatch, nodes, seen)
    at_once: list[list[tuple[str, int]]] = []
    followers: list[str] = []

    async def scenario() -> None:
        deadline = time.monotonic() + 30
        leader = await settled_leader(nodes, deadline)
        followers.extend(sorted(n for n in nodes if n != leader.name))
        watching.append(True)
        leader.propose(b'{"t":"prune","below":1,"reason":"x","ts":1}', lambda ok, why: None)
        leader.send_proposals()
        at_once.append(list(sent))  # no await since the proposal
        while any(m.state.rejected + m.state.prunes < 1 for m in machines.values()):
            assert time.monotonic() < deadline, "the proposal was not applied everywhere"
            await asyncio.sleep(0.001)

    run_rafts(nodes, scenario)

    assert sorted(at_once[0]) == [(f, 1) for f in followers]
