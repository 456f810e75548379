"""Raft tells its node at once when the leader it knows changes: the sequencer's observer
then names the new leader to the pull server and judges fitness without waiting for its
next second.

Three real raft nodes (pysyncobj over mutual TLS on loopback) on one event loop."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest

from rt_appliance.sequencer.raft import RaftNode
from tests.helpers import raft_cluster

pytestmark = pytest.mark.integration


def test_each_node_is_told_of_a_new_leader_when_it_sees_one(tmp_path: Path) -> None:
    _, _, nodes = raft_cluster(tmp_path)
    told: dict[str, list[tuple[str | None, bool]]] = {name: [] for name in nodes}

    def hook(name: str, node: RaftNode) -> None:
        node.on_leader_change = lambda: told[name].append((node.leader(), node.is_leader()))

    for name, node in nodes.items():
        hook(name, node)

    async def until(what: str, done: object) -> None:
        deadline = time.monotonic() + 30
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.01)

    async def scenario() -> tuple[str, str]:
        tasks = {name: asyncio.create_task(node.run()) for name, node in nodes.items()}
        try:
            await until("a leader", lambda: any(n.is_leader() for n in nodes.values()))
            first = next(name for name, n in nodes.items() if n.is_leader())
            await until(
                "every node told of it", lambda: all(t and t[-1][0] == first for t in told.values())
            )
            await until("the leader told it leads", lambda: told[first][-1] == (first, True))
            tasks[first].cancel()
            await asyncio.gather(tasks[first], return_exceptions=True)
            nodes.pop(first).destroy()
            rest = list(nodes)
            await until("another leader", lambda: any(nodes[n].is_leader() for n in rest))
            second = next(name for name in rest if nodes[name].is_leader())
            await until(
                "the others told of it", lambda: all(told[n][-1][0] == second for n in rest)
            )
            return first, second
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    try:
        first, second = asyncio.run(scenario())
    finally:
        for node in nodes.values():
            node.destroy()
    assert second != first
    assert told[second][-1] == (second, True)
    follower = next(n for n in nodes if n != second)
    assert (second, False) in told[follower]
    # told of changes only: never the same twice in a row
    assert all(a != b for t in told.values() for a, b in itertools.pairwise(t))
