"""A follower does not send an answer that repeats its last one within half a heartbeat.

Three real raft nodes (pysyncobj over mutual TLS on loopback, synced journals) on one
event loop. A proposal reaches each follower twice: its entries, then the leader's
commit news (an append with no entries). pysyncobj's follower answers both the same way;
the second answer tells the leader nothing, and is not sent. Heartbeats, a period apart,
are still answered, so the leader keeps hearing from every follower.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import raft_cluster, run_rafts, settled_leader, watch_raft_sends

pytestmark = pytest.mark.integration

HEARTBEAT_S = 0.1  # the local stream's append_entries_period_ms


def test_a_repeated_answer_is_not_sent_and_heartbeats_are_still_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config, machines, nodes = raft_cluster(tmp_path)
    answers: list[tuple[float, str, int]] = []  # (when, follower, next index) sent
    watching: list[bool] = []

    def seen(sender: str, _to: str, message: dict[str, Any]) -> None:
        if watching and message.get("type") == "next_node_idx" and message["success"]:
            answers.append((time.monotonic(), sender, int(message["next_node_idx"])))

    watch_raft_sends(monkeypatch, nodes, seen)
    applied_at: list[float] = []

    async def scenario() -> None:
        deadline = time.monotonic() + 30
        leader = await settled_leader(nodes, deadline)
        await asyncio.sleep(HEARTBEAT_S)  # a heartbeat's answers are out of the way
        watching.append(True)
        leader.propose(b'{"t":"prune","below":1,"reason":"x","ts":1}', lambda ok, why: None)
        while any(m.state.rejected + m.state.prunes < 1 for m in machines.values()):
            assert time.monotonic() < deadline, "the proposal was not applied everywhere"
            await asyncio.sleep(0.001)
        applied_at.append(time.monotonic())
        await asyncio.sleep(3.5 * HEARTBEAT_S)  # heartbeats meanwhile

    run_rafts(nodes, scenario)

    leader = next(name for name, node in nodes.items() if node.is_leader())
    followers = sorted(name for name in nodes if name != leader)
    for follower in followers:
        mine = [(at, index) for at, name, index in answers if name == follower]
        new_index = max(index for _, index in mine)
        # the entries were answered once: the commit news' answer repeated it and stayed
        around = [at for at, index in mine if index == new_index and at <= applied_at[0]]
        assert len(around) == 1, (follower, mine)
        # and the heartbeats after it were answered, about one a period
        later = [at for at, _ in mine if at > applied_at[0] + HEARTBEAT_S / 2]
        assert len(later) >= 2, (follower, mine)
