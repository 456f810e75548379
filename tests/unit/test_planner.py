"""The leader's planner: reports and raft's callbacks never wait for a planning step."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rt_appliance.config import load_config
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
    for peer in ("rt-2", "rt-3"):
        planner.report(peer, {DIR: HELD})
    planner.step()
    assert told == []  # just found behind: its push may still land
    planner._behind_since[DIR] -= planner._behind_after_s  # as long ago as the bound
    planner.step()
    assert len(told) == 1 and told[0].startswith(f"{DIR}: this node holds up to")
    raft.current = 2  # a new leadership starts the count again
    planner.step()
    assert len(told) == 1


def test_a_leader_whose_copy_keeps_coming_late_is_not_behind(tmp_path: Path) -> None:
    """At full speed a busy leader's own copy trails the followers' by a megabyte or so,
    and goes on arriving: that is not a copy that stopped. Each time it reaches what a
    majority held when it fell behind the count starts again, so it never hands over;
    a copy that stops moving is told after the bound (the test above)."""
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    told: list[str] = []
    base = int(Position.of(1, 0, 64))
    mine = [base]

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
    for step in range(1, 6):
        majority = base + step * 1_000_000
        for peer in ("rt-2", "rt-3"):
            planner.report(peer, {DIR: majority})
        planner.step()
        planner._behind_since[DIR] -= planner._behind_after_s  # each step a bound later
        mine[0] = majority + 500_000  # past what a majority held, behind the next report
    assert told == []
    for peer in ("rt-2", "rt-3"):  # the majority goes on; this copy now stands still
        planner.report(peer, {DIR: mine[0] + 1_000_000})
    planner.step()
    assert told == []
    planner._behind_since[DIR] -= planner._behind_after_s
    planner.step()
    assert len(told) == 1 and "this node holds up to" in told[0]
