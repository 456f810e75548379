"""A follower does not send an answer that repeats its last one, except now and then.

Three real raft nodes (pysyncobj over mutual TLS on loopback, synced journals) on one
event loop. A proposal reaches each follower twice: its entries, then the leader's
commit news (an append with no entries). pysyncobj's follower answers both the same way;
the second answer tells the leader nothing, and is not sent. Heartbeats, a period apart,
bring nothing new either: a follower answers one every ``Link.quiet_answer_s`` (an
election timeout), so the leader still hears from every follower several times within
its fallback timeout, and leads on in the same term.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import raft_cluster, run_rafts, settled_leader, watch_raft_sends

pytestmark = pytest.mark.integration

HEARTBEAT_S = 0.1  # the local stream's append_entries_period_ms
QUIET_S = 0.4  # its raft_min_timeout_ms: Link.quiet_answer_s


def test_a_repeated_answer_is_not_sent_and_heartbeats_are_answered_now_and_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config, machines, nodes = raft_cluster(tmp_path)
    assert {n._link.quiet_answer_s for n in nodes.values()} == {QUIET_S}
    answers: list[tuple[float, str, int]] = []  # (when, follower, next index) sent
    watching: list[bool] = []

    def seen(sender: str, _to: str, message: dict[str, Any]) -> None:
        if watching and message.get("type") == "next_node_idx" and message["success"]:
            answers.append((time.monotonic(), sender, int(message["next_node_idx"])))

    watch_raft_sends(monkeypatch, nodes, seen)
    applied_at: list[float] = []
    terms: list[int] = []

    async def scenario() -> None:
        deadline = time.monotonic() + 30
        leader = await settled_leader(nodes, deadline)
        terms.append(leader.term())
        await asyncio.sleep(HEARTBEAT_S)  # a heartbeat's answers are out of the way
        watching.append(True)
        leader.propose(b'{"t":"prune","below":1,"reason":"x","ts":1}', lambda ok, why: None)
        while any(m.state.rejected + m.state.prunes < 1 for m in machines.values()):
            assert time.monotonic() < deadline, "the proposal was not applied everywhere"
            await asyncio.sleep(0.001)
        applied_at.append(time.monotonic())
        await asyncio.sleep(4 * QUIET_S)  # heartbeats meanwhile: 16 to each follower
        terms.append(leader.term())
        assert leader.is_leader()

    run_rafts(nodes, scenario)
    assert terms[0] == terms[1], "the leader heard too little and an election followed"

    leader = next(name for name, node in nodes.items() if node.is_leader())
    followers = sorted(name for name in nodes if name != leader)
    for follower in followers:
        mine = [(at, index) for at, name, index in answers if name == follower]
        new_index = max(index for _, index in mine)
        # the entries were answered once: the commit news' answer repeated it and stayed
        around = [at for at, index in mine if index == new_index and at <= applied_at[0]]
        assert len(around) == 1, (follower, mine)
        # the heartbeats after it: one answered every QUIET_S (the next heartbeat at or
        # after QUIET_S since the last answer), the rest not sent
        later = [at for at, _ in mine if at > applied_at[0]]
        assert 3 <= len(later) <= 5, (follower, later)
        gaps = [b - a for a, b in itertools.pairwise(later)]
        assert all(QUIET_S <= gap <= QUIET_S + HEARTBEAT_S + 0.1 for gap in gaps), gaps


def test_an_idle_follower_is_ticked_by_the_leaders_messages_alone(tmp_path: Path) -> None:
    """A follower's timer serves its election deadline only: each heartbeat ticks the
    follower and puts the deadline back, so with a live leader the timer never fires
    (before, it fired every 100 ms between heartbeats, waking an idle node for nothing)."""
    _config, _machines, nodes = raft_cluster(tmp_path)
    timer_ticks: dict[str, int] = {name: 0 for name in nodes}
    watching: list[bool] = []

    kicked: list[bool] = []
    for name, node in nodes.items():
        tick, kick = node._tick, node._kicked

        def on_tick(name: str = name, tick: Any = tick) -> None:
            if watching and not kicked:  # raft's timer, not a message, proposal or peer
                timer_ticks[name] += 1
            tick()

        def on_kick(kick: Any = kick) -> None:
            kicked.append(True)
            try:
                kick()
            finally:
                kicked.clear()

        node._tick = on_tick  # type: ignore[method-assign]
        node._kicked = on_kick  # type: ignore[method-assign]

    terms: list[int] = []

    async def scenario() -> None:
        leader = await settled_leader(nodes, time.monotonic() + 30)
        terms.append(leader.term())
        watching.append(True)
        await asyncio.sleep(15 * HEARTBEAT_S)
        watching.clear()
        terms.append(leader.term())

    run_rafts(nodes, scenario)
    assert terms[0] == terms[1]
    leader = next(name for name, node in nodes.items() if node.is_leader())
    assert timer_ticks[leader] >= 12, timer_ticks  # the leader's heartbeats are its timer's
    followers = {name: n for name, n in timer_ticks.items() if name != leader}
    assert followers == {name: 0 for name in followers}, timer_ticks
