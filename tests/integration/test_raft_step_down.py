"""A leader told once that it is unfit keeps asking for the hand-over on its own ticks
until a follower is caught up: the first request is refused when a follower lacks the
newest entry, and leadership must still move within ``STEP_DOWN_FORCE_S``, by hand-over.

Three real raft nodes (pysyncobj over mutual TLS on loopback) on one event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from rt_appliance.sequencer.state import Prune
from tests.helpers import raft_cluster

pytestmark = pytest.mark.integration


def test_a_refused_hand_over_is_asked_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, _, nodes = raft_cluster(tmp_path)

    async def until(what: str, done: object, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.01)

    async def scenario() -> tuple[str, str | None]:
        tasks = [asyncio.create_task(node.run()) for node in nodes.values()]
        try:
            await until("a leader", lambda: any(n.is_leader() for n in nodes.values()))
            name = next(n for n, node in nodes.items() if node.is_leader())
            leader = nodes[name]
            await until(
                "every node in step",
                lambda: len({n.status().commit_index for n in nodes.values()}) == 1,
            )
            # a new entry the followers cannot have yet: the first hand-over is refused
            leader.propose(Prune(0, "test", 0).encode(), lambda ok, why: None)
            leader._obj.doTick(0.0)  # appended to the leader's log now
            leader.set_unfit("a test")  # once: no observer asks again here
            await until(
                "another leader", lambda: any(n.is_leader() for k, n in nodes.items() if k != name)
            )
            return name, next(k for k, n in nodes.items() if n.is_leader())
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    with caplog.at_level(logging.INFO, logger="rt_appliance.sequencer.raft"):
        try:
            old, new = asyncio.run(scenario())
        finally:
            for node in nodes.values():
                node.destroy()
    assert new is not None and new != old
    assert "stepping down as leader" in caplog.text
    assert "no follower caught up" not in caplog.text, caplog.text  # handed over
