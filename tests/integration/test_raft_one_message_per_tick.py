"""What one raft tick makes new goes to each follower in one message.

Three real raft nodes (pysyncobj over mutual TLS on loopback, synced journals) on one
event loop. Proposals made in one turn of the loop are taken by one tick of the leader,
and every follower gets them all in one ``append_entries`` message, not one message per
proposal (pysyncobj's own way with batching off, which also sent a message per commit).
The commit that follows reaches every node without waiting for a heartbeat.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import raft_cluster, run_rafts, settled_leader, watch_raft_sends

pytestmark = pytest.mark.integration

PROPOSALS = 5
HEARTBEAT_S = 0.1  # the local stream's append_entries_period_ms


def test_proposals_of_one_turn_reach_each_follower_in_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config, machines, nodes = raft_cluster(tmp_path)
    sent: list[tuple[str, str, int, int]] = []  # (from, to, entries, commit index)
    watching: list[bool] = []

    def seen(sender: str, to: str, message: dict[str, Any]) -> None:
        if watching and message.get("type") == "append_entries":
            entries = len(message.get("entries") or ())
            sent.append((sender, to, entries, int(message["commit_index"])))

    watch_raft_sends(monkeypatch, nodes, seen)
    decided: list[bool] = []
    took: list[float] = []

    async def scenario() -> None:
        deadline = time.monotonic() + 30
        leader = await settled_leader(nodes, deadline)
        watching.append(True)
        began = time.monotonic()
        for below in range(1, PROPOSALS + 1):  # in one turn: no await between them
            command = b'{"t":"prune","below":%d,"reason":"x","ts":1}' % below
            leader.propose(command, lambda ok, why: decided.append(ok))
        while any(m.state.rejected + m.state.prunes < PROPOSALS for m in machines.values()):
            assert time.monotonic() < deadline, "the proposals were not applied everywhere"
            await asyncio.sleep(0.001)
        took.append(time.monotonic() - began)

    run_rafts(nodes, scenario)

    assert len(decided) == PROPOSALS
    states = [m.state.to_json() for m in machines.values()]
    assert all(state == states[0] for state in states)
    leader = next(name for name, node in nodes.items() if node.is_leader())
    followers = sorted(name for name in nodes if name != leader)
    with_entries = [s for s in sent if s[0] == leader and s[2] > 0]
    # every follower got the five entries in one message, and nothing else with entries
    assert sorted((to, n) for _, to, n, _ in with_entries) == [(f, PROPOSALS) for f in followers]
    # the commit was sent at once (raft's heartbeat is 100 ms; applied on all well before)
    assert took[0] < 2 * HEARTBEAT_S, f"applied everywhere only after {took[0]:.3f} s"
