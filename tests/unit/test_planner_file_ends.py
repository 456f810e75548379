"""A leader whose copy of an input file was cut short does not plan past the cut.

Its copy of an older file ends early (a truncation, damage cut away), while a majority
holds later files of that input. Moving on to the next file from the short end would
leave the records past the cut out of the merged log for good: the leader waits until a
majority's copies end where its own does, and says it is behind (so it hands over).
Real input files on disk; raft is a stand-in that commits each proposal at once.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rt_appliance import Publisher
from rt_appliance.config import load_config
from rt_appliance.log.format import decode_file_header
from rt_appliance.log.scan import scan
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.planner import Planner
from rt_appliance.sequencer.state import Merge, decode_instruction
from rt_lab.testing.cluster import write_local_config
from tests.unit.test_planner import _Raft

pytestmark = pytest.mark.unit

DIR = "trades.pub-1"
MESSAGES = 200


class _CommitAtOnce(_Raft):
    """Raft as the planner sees it: this node leads, and every proposal commits."""

    def __init__(self, machine: SequencerMachine) -> None:
        self.machine = machine
        self.merged_ids = 0  # records the committed merges carry

    def propose(self, command: bytes, done: Any) -> None:
        ins = decode_instruction(command)
        accepted = self.machine.apply(command)
        if accepted and isinstance(ins, Merge):
            self.merged_ids += ins.count
        done(accepted, "" if accepted else "rejected")


def _copies(tmp_path: Path) -> tuple[Path, Path]:
    """The leader's and a follower's ``in/``, each with the same input over several files."""
    with Publisher(tmp_path / "pub", "trades", "pub-1", roll_bytes=2048) as pub:
        for i in range(MESSAGES):
            pub.publish(f"trade {i:05d}".encode())
    leader, follower = tmp_path / "rt-1" / "in", tmp_path / "rt-2" / "in"
    for copy in (leader, follower):
        shutil.copytree(tmp_path / "pub" / DIR, copy / DIR)
    return leader, follower


def _cut(path: Path, into_record: int) -> int:
    """Cut ``path`` at its middle record's start, plus ``into_record`` bytes; return where
    the whole records left end."""
    data = path.read_bytes()
    header = decode_file_header(data)
    assert not isinstance(header, str)
    found = scan(data, header.header_bytes, 10_000, decode=False)
    boundary = found.offsets[len(found.offsets) // 2]  # from the start of the file
    with open(path, "r+b") as f:
        f.truncate(boundary + into_record)
    return boundary


def _plan(planner: Planner, follower: Inputs, machine: SequencerMachine) -> None:
    """Steps until nothing more is planned, the followers reporting before each."""
    for _ in range(1000):
        with machine.cond:
            merged = dict(machine.state.inputs)
        for peer in ("rt-2", "rt-3"):  # both followers hold what rt-2's copy holds
            planner.report(peer, follower.extents(), follower.file_ends(merged))
        if planner.step() == 0:
            return
    raise AssertionError("the planner never settled")


@pytest.mark.parametrize("into_record", [0, 9], ids=["at-a-record", "inside-a-record"])
def test_the_plan_stops_at_a_cut_and_goes_on_once_the_copy_is_whole(
    tmp_path: Path, into_record: int
) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))
    leader_in, follower_in = _copies(tmp_path)
    files = list_files(leader_in / DIR)
    assert len(files) >= 4, "the input should span several files"
    damaged = files[1].path
    whole = damaged.read_bytes()
    cut = _cut(damaged, into_record)

    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    raft = _CommitAtOnce(machine)
    told: list[str] = []
    planner = Planner(
        config, "rt-1", machine, Inputs(leader_in, sync=False), raft, lambda: None, told.append
    )  # type: ignore[arg-type]
    follower = Inputs(follower_in, sync=False)

    _plan(planner, follower, machine)
    at = Position(machine.state.inputs[DIR])
    assert (at.session, at.roll, at.offset) == (files[1].session, files[1].roll, cut), (
        "the plan went past the cut"
    )
    assert raft.merged_ids < MESSAGES
    assert told == []  # just found short: a repair may come
    planner._behind_since[DIR] -= planner._behind_after_s  # as long ago as the bound
    _plan(planner, follower, machine)
    why = "rt-2's at" if into_record == 0 else "no whole record"
    assert len(told) == 1 and why in told[0], told

    damaged.write_bytes(whole)  # the copy is whole again (a repair, a new leader's copy)
    _plan(planner, follower, machine)
    assert raft.merged_ids == MESSAGES  # every record merged, none left out


def test_the_plan_moves_past_a_whole_file_a_majority_agrees_on(tmp_path: Path) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))
    leader_in, follower_in = _copies(tmp_path)
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    raft = _CommitAtOnce(machine)
    planner = Planner(config, "rt-1", machine, Inputs(leader_in, sync=False), raft, lambda: None)  # type: ignore[arg-type]
    _plan(planner, Inputs(follower_in, sync=False), machine)
    assert raft.merged_ids == MESSAGES


def test_a_follower_copy_cut_short_does_not_hold_back_a_whole_leader(tmp_path: Path) -> None:
    """Two of three nodes up, the follower's copy cut: the leader's is the longest known,
    and a majority's copies are known, so it plans on (what was acknowledged is in it)."""
    config = load_config(write_local_config(tmp_path, nodes=3))
    leader_in, follower_in = _copies(tmp_path)
    _cut(list_files(follower_in / DIR)[1].path, 0)
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    raft = _CommitAtOnce(machine)
    planner = Planner(config, "rt-1", machine, Inputs(leader_in, sync=False), raft, lambda: None)  # type: ignore[arg-type]
    follower = Inputs(follower_in, sync=False)
    for _ in range(1000):
        with machine.cond:
            merged = dict(machine.state.inputs)
        planner.report("rt-2", follower.extents(), follower.file_ends(merged))  # rt-3 is down
        if planner.step() == 0:
            break
    assert raft.merged_ids == MESSAGES
