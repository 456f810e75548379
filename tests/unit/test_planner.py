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
