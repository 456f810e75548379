"""A follower that restarts slowly rejoins without unseating a healthy leader.

Three real raft nodes (pysyncobj over mutual TLS on loopback) on one event loop. A
node's raft is built before the rest of the node starts (the merged log's recovery, the
servers), and pysyncobj ran its first election timeout from then: a follower that took
longer than that to start stood at its first connection, before the leader's heartbeat
reached it, and its higher term made the leader step down. And the leader, which had
backed off dialling the absent follower (up to 1 s between tries), sent its first
heartbeat only at its next try. The timeout now runs from when raft starts, and a node
that a peer connects to dials that peer back at once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.integration

SLOW_START_S = 1.5  # longer than the longest election timeout (1 s)


def test_a_slowly_restarted_follower_leaves_the_leader_in_place(tmp_path: Path) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))

    def made(name: str) -> RaftNode:
        machine = SequencerMachine(config.stream, 1 << 20)
        return RaftNode(config, name, tmp_path / name / "raft", machine)

    nodes = {n.name: made(n.name) for n in config.nodes}

    async def scenario() -> tuple[int, int, str, str]:
        tasks = {name: asyncio.create_task(node.run()) for name, node in nodes.items()}
        try:
            deadline = time.monotonic() + 30
            while not any(n.is_leader() for n in nodes.values()):
                assert time.monotonic() < deadline, "no leader was elected"
                await asyncio.sleep(0.01)
            leader = next(name for name, n in nodes.items() if n.is_leader())
            term = nodes[leader].term()
            follower = next(name for name in nodes if name != leader)
            tasks[follower].cancel()
            await asyncio.gather(tasks[follower], return_exceptions=True)
            nodes[follower].destroy()
            await asyncio.sleep(0.5)

            nodes[follower] = made(follower)  # raft built ...
            await asyncio.sleep(SLOW_START_S)  # ... then the rest of the node starts
            tasks[follower] = asyncio.create_task(nodes[follower].run())
            while nodes[follower].leader() is None:
                assert time.monotonic() < deadline + 30, "the follower never found a leader"
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.5)  # a whole election timeout more, for a term to change
            return term, nodes[leader].term(), leader, nodes[follower].leader() or ""
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    try:
        term_before, term_after, leader, seen = asyncio.run(scenario())
    finally:
        for node in nodes.values():
            node.destroy()
    assert term_after == term_before, "the restarted follower unseated the leader"
    assert seen == leader
