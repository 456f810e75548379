"""The leader's planner: reports and raft's callbacks never wait for a planning step."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rt_appliance.config import load_config
from rt_appliance.limits import LEADER_INPUT_LAGGING_S
from rt_appliance.position import Position
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.planner import Planner
from rt_lab.testing.cluster import write_local_config

DIR = "trades.pub-1"
HELD = int(Position.of(1, 0, 4096))


class _SlowInput:
    """An input whose read blocks until ``gate`` opens: a step busy reading a large range."""

    def __init__(self) -> None:
        self.gate, self.entered = threading.Event(), threading.Event()

    def first_record(self) -> Position:
        return Position.of(1, 0, 64)

    def read(self, start: Position, end: Position, limit: int) -> None:
        self.entered.set()
        self.gate.wait(5)
        return None


class _Inputs:
    def __init__(self, one: _SlowInput) -> None:
        self.one = one

    def extents(self) -> dict[str, int]:
        return {DIR: HELD}

    def names(self) -> list[str]:
        return [DIR]

    def get(self, name: str) -> _SlowInput:
        return self.one

    tracks_writes = False  # no push server in this process: nothing is carried


class _Raft:
    def is_leader(self) -> bool:
        return True

    def leading_settled(self) -> bool:
        return True

    def term(self) -> int:
        return 1

    def propose(self, command: bytes, done: Any) -> None:
        raise AssertionError("nothing can be proposed: the read finds no records")


def test_a_report_does_not_wait_for_a_step_reading_input(tmp_path: Path) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    slow = _SlowInput()
    planner = Planner(config, "rt-1", machine, _Inputs(slow), _Raft(), lambda: None)  # type: ignore[arg-type]
    planner.report("rt-2", {DIR: HELD})  # with this node's own extent: a majority holds it
    step = threading.Thread(target=planner.step)
    step.start()
    try:
        assert slow.entered.wait(5), "the step never read the input"
        started = time.monotonic()
        planner.report("rt-3", {DIR: HELD})  # on the event loop in the daemon
        took = time.monotonic() - started
    finally:
        slow.gate.set()
        step.join(5)
    assert took < 1.0, f"a report waited {took:.1f} s for the planning step"
    assert planner.reports()["rt-3"] == {DIR: HELD}


class _Input:
    """An input this node holds none of (its push server is down)."""

    def first_record(self) -> Position:
        return Position.of(1, 0, 64)

    def read(self, start: Position, end: Position, limit: int) -> None:
        return None


class _Leader(_Raft):
    def __init__(self) -> None:
        self.current = 1

    def term(self) -> int:
        return self.current


def test_a_leader_lacking_input_a_majority_holds_is_told_so_after_a_while(tmp_path: Path) -> None:
    """The planner says so (``behind``) once this leader has lacked input bytes a majority
    holds for ``max(LEADER_INPUT_BEHIND_S, fetch_after_ms)``, counted afresh in each term."""
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    told: list[str] = []

    class _Empty(_Inputs):
        def extents(self) -> dict[str, int]:
            return {DIR: 0}

    raft = _Leader()
    planner = Planner(
        config,
        "rt-1",
        machine,
        _Empty(_Input()),
        raft,
        lambda: None,
        told.append,  # type: ignore[arg-type]
    )
    now = [1000.0]
    planner.clock = lambda: now[0]
    for peer in ("rt-2", "rt-3"):
        planner.report(peer, {DIR: HELD})
    planner.step()
    assert told == []  # just found behind: its push may still land
    now[0] += planner._behind_after_s - 0.01
    planner.step()
    assert told == []
    now[0] += 0.01  # as long ago as the bound
    planner.step()
    assert len(told) == 1 and told[0].startswith(f"{DIR}: this node holds up to")
    assert "has not grown" in told[0]
    raft.current = 2  # a new leadership starts the count again
    planner.step()
    assert len(told) == 1


def _trailing(tmp_path: Path) -> tuple[Planner, list[int], list[float], list[str]]:
    """A leader whose own copy's extent is ``mine[0]``, on a clock at ``now[0]``."""
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    told: list[str] = []
    mine = [int(Position.of(1, 0, 64))]

    class _Trailing(_Inputs):
        def extents(self) -> dict[str, int]:
            return {DIR: mine[0]}

    planner = Planner(
        config,
        "rt-1",
        machine,
        _Trailing(_Input()),
        _Leader(),
        lambda: None,
        told.append,  # type: ignore[arg-type]
    )
    now = [1000.0]
    planner.clock = lambda: now[0]
    return planner, mine, now, told


def _majority_holds(planner: Planner, position: int) -> None:
    for peer in ("rt-2", "rt-3"):
        planner.report(peer, {DIR: position})


def test_a_leader_whose_copy_keeps_coming_late_is_not_behind(tmp_path: Path) -> None:
    """At full speed a busy leader's own copy trails the followers' by a second or more
    (27 MB at the end of a 1,000,000-message run), and goes on arriving: that is not a
    copy that stopped, and any node leading would be as busy. It is not handed over while
    it grows; a copy that stops moving is told after the bound (the test above)."""
    planner, mine, now, told = _trailing(tmp_path)
    for _ in range(8):  # it never catches up with the majority, and keeps growing
        _majority_holds(planner, mine[0] + 30_000_000)
        planner.step()
        now[0] += 0.9 * planner._behind_after_s
        mine[0] += 5_000_000
    assert told == []
    planner.step()  # the majority goes on; this copy now stands still
    now[0] += planner._behind_after_s
    planner.step()
    assert len(told) == 1 and "has not grown" in told[0]


def test_a_copy_that_grows_but_trails_for_long_is_behind(tmp_path: Path) -> None:
    """A copy that grows, but so slowly that it never reaches what a majority held when
    it fell behind (a slow link or disk), is told after ``LEADER_INPUT_LAGGING_S``."""
    planner, mine, now, told = _trailing(tmp_path)
    _majority_holds(planner, mine[0] + 30_000_000)
    start = now[0]
    while now[0] - start < LEADER_INPUT_LAGGING_S - 0.5:
        planner.step()
        now[0] += 0.5
        mine[0] += 1_000  # a trickle
        _majority_holds(planner, mine[0] + 30_000_000)
    assert told == []
    now[0] += 0.5
    planner.step()
    assert len(told) == 1 and "trailed a majority's for 10.0 s" in told[0]
