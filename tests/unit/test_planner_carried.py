"""The leader carries input no majority reported holding in its raft entries, within a bound.

Real input files on disk, as the leader's push server wrote them (``written`` says how
far); raft is a stand-in that holds every proposal until the test decides it. The
followers report holding only the start of the input: what they hold is planned as
before, with no bytes in the entry; the rest is planned from the leader's copy with the
bytes in the entry, at most ``CARRY_MAX_BYTES`` in flight; and nothing is carried while
a peer has not said it applies such merges (an older release).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.config import load_config
from rt_appliance.limits import CARRY_MAX_BYTES
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.replicate.sink import FileEnd
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.planner import Planner
from rt_appliance.sequencer.state import Merge, decode_instruction
from rt_appliance.versions import CARRIED_INPUT
from rt_lab.testing.cluster import write_local_config
from tests.unit.test_planner import _Raft

pytestmark = pytest.mark.unit

DIR = "trades.pub-1"
MESSAGES = 1000  # of about 100 bytes: more than CARRY_MAX_BYTES past the followers' copies
REPORTED = 10  # records the followers hold


class _Holding(_Raft):
    """This node leads; proposals wait in :attr:`held` until :meth:`decide`."""

    def __init__(self, machine: SequencerMachine, peers_carry: bool) -> None:
        self.machine, self.peers_carry = machine, peers_carry
        self.held: list[tuple[bytes, Callable[[bool, str], None]]] = []
        self.merges: list[Merge] = []

    def peers_do(self, feature: str) -> bool:
        assert feature == CARRIED_INPUT
        return self.peers_carry

    def propose(self, command: bytes, done: Callable[[bool, str], None]) -> None:
        self.held.append((command, done))

    def decide(self) -> None:
        """Commit every proposal held, in order."""
        held, self.held = self.held, []
        for command, done in held:
            ins = decode_instruction(command)
            assert isinstance(ins, Merge), ins
            assert self.machine.apply(command)
            self.merges.append(ins)
            done(True, "")


def _setup(tmp_path: Path, peers_carry: bool) -> tuple[Planner, _Holding, Path, Position]:
    with Publisher(tmp_path / "pub", "trades", "pub-1", roll_bytes=4 << 20) as pub:
        for i in range(MESSAGES):
            pub.publish(f"trade {i:05d}".encode().ljust(100, b"."))
    leader_in = tmp_path / "rt-1" / "in"
    shutil.copytree(tmp_path / "pub" / DIR, leader_in / DIR)
    (newest,) = list_files(leader_in / DIR)
    written = Position.of(newest.session, newest.roll, newest.path.stat().st_size)
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    raft = _Holding(machine, peers_carry)
    inputs = Inputs(leader_in, sync=False, written=lambda name: written if name == DIR else None)
    planner = Planner(config, "rt-1", machine, inputs, raft, lambda: None)  # type: ignore[arg-type]
    return planner, raft, newest.path, written


def _reported(path: Path, planner: Planner) -> int:
    """The followers report holding the first ``REPORTED`` records; returns where they end."""
    first = planner.inputs.get(DIR).first_record()
    assert first is not None
    records = planner.inputs.get(DIR).read(first, first.with_offset(4 << 20), 1 << 20)
    assert records is not None
    end = int(first.with_offset(first.offset + records.offsets[REPORTED]))
    for peer in ("rt-2", "rt-3"):
        planner.report(peer, {DIR: end})
    return end


def test_what_no_majority_holds_is_carried_within_the_bound(tmp_path: Path) -> None:
    planner, raft, path, written = _setup(tmp_path, peers_carry=True)
    reported = _reported(path, planner)
    data = path.read_bytes()
    carried_total = 0
    for _ in range(100):
        planner.step()
        proposed = [decode_instruction(c) for c, _ in raft.held]
        carried = [m for m in proposed if isinstance(m, Merge) and m.data is not None]
        in_flight = sum(len(m.data or b"") for m in carried)
        assert in_flight <= CARRY_MAX_BYTES, "more carried at once than the bound"
        carried_total += len(carried)
        raft.decide()
        if raft.machine.state.inputs.get(DIR) == int(written):
            break
    else:
        raise AssertionError("the planner never reached the end of the written input")
    plain = [m for m in raft.merges if m.data is None]
    assert plain and plain[-1].end == reported, "what the followers hold goes without bytes"
    assert all(m.start >= reported for m in raft.merges if m.data is not None)
    assert carried_total >= 2, "the bound should have cut the carried input into turns"
    for m in raft.merges:  # every carried range is exactly the input's bytes
        if m.data is not None:
            start, end = Position(m.start), Position(m.end)
            assert m.data == data[start.offset : end.offset]
    assert sum(m.count for m in raft.merges) == MESSAGES


def test_nothing_is_carried_while_a_peer_may_not_apply_it(tmp_path: Path) -> None:
    planner, raft, path, _ = _setup(tmp_path, peers_carry=False)
    reported = _reported(path, planner)
    for _ in range(10):
        planner.step()
        raft.decide()
    assert raft.merges, "what a majority holds is planned"
    assert all(m.data is None for m in raft.merges)
    assert raft.machine.state.inputs[DIR] == reported, "nothing past what a majority holds"
    assert not planner.carrying


def test_an_inputs_first_range_is_carried_with_no_report_at_all(tmp_path: Path) -> None:
    planner, raft, _, _ = _setup(tmp_path, peers_carry=True)
    planner.step()
    raft.decide()
    assert raft.merges and raft.merges[0].data is not None
    first = planner.inputs.get(DIR).first_record()
    assert raft.merges[0].start == int(first)  # type: ignore[arg-type]


def _setup_rolled(tmp_path: Path, seen: bool) -> tuple[Planner, _Holding, list[Path], Position]:
    """An input in several files on the leader (rolled, then a new session); its push
    server saw the sender move on from each file but the newest if ``seen``."""
    for session in range(2):
        with Publisher(tmp_path / "pub", "trades", "pub-1", roll_bytes=8 << 10) as pub:
            for i in range(100):
                pub.publish(f"trade {session} {i:05d}".encode().ljust(100, b"."))
    leader_in = tmp_path / "rt-1" / "in"
    shutil.copytree(tmp_path / "pub" / DIR, leader_in / DIR)
    files = list_files(leader_in / DIR)
    assert len(files) >= 3 and files[0].session != files[-1].session
    newest = files[-1]
    written = Position.of(newest.session, newest.roll, newest.path.stat().st_size)
    ends = {}
    for f, nxt in itertools.pairwise(files):
        first = Inputs(leader_in, sync=False).get(DIR).next_file_start(Position.of(*f.key, 0))
        assert first is not None and first.file_key == nxt.key
        ends[f.key] = FileEnd(f.path.stat().st_size, first)
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    raft = _Holding(machine, peers_carry=True)
    inputs = Inputs(
        leader_in,
        sync=False,
        written=lambda name: written if name == DIR else None,
        ended=lambda name, key: ends.get(key) if seen and name == DIR else None,
    )
    planner = Planner(config, "rt-1", machine, inputs, raft, lambda: None)  # type: ignore[arg-type]
    return planner, raft, [f.path for f in files], written


def _run(planner: Planner, raft: _Holding, turns: int = 200) -> None:
    for _ in range(turns):
        if not planner.step():
            break
        raft.decide()


def test_a_file_end_its_push_server_saw_is_crossed_with_no_report(tmp_path: Path) -> None:
    """Publishers reaching only the leader: no follower reports anything, and the leader
    carries the input through every roll and into the next session."""
    planner, raft, paths, written = _setup_rolled(tmp_path, seen=True)
    _run(planner, raft)
    assert raft.machine.state.inputs.get(DIR) == int(written), "stopped before the end"
    assert all(m.data is not None for m in raft.merges), "no report: everything carried"
    assert sum(m.count for m in raft.merges) == 200
    merged_files = {Position(m.start).file_key for m in raft.merges}
    assert len(merged_files) == len(paths)
    for m in raft.merges:
        start, end = Position(m.start), Position(m.end)
        path = next(p for p in paths if p.name == f"log.{start.session}.{start.roll}")
        assert m.data == path.read_bytes()[start.offset : end.offset]


def test_without_seeing_the_end_the_leader_waits_for_the_reports(tmp_path: Path) -> None:
    """Nothing merged leaves the first file: an older file's end is not known, and the
    writer has moved on from it, so not even its records are carried."""
    planner, raft, paths, _ = _setup_rolled(tmp_path, seen=False)
    _run(planner, raft)
    first = list_files(paths[0].parent)[0]
    assert all(Position(m.start).file_key == first.key for m in raft.merges)


def test_a_longer_copy_elsewhere_stops_the_crossing(tmp_path: Path) -> None:
    """A follower said its copy of the first file goes on past where the leader saw it end
    (the publisher lost that tail after sending it there): the leader does not move on on
    its own word; the majority's ends decide, as before (here they dispute it)."""
    planner, raft, paths, _ = _setup_rolled(tmp_path, seen=True)
    files = list_files(paths[0].parent)
    end = Position.of(*files[0].key, paths[0].stat().st_size)
    second = Position.of(*files[1].key, paths[1].stat().st_size)
    longer = end.with_offset(end.offset + 100)
    planner.report("rt-2", {DIR: int(second)}, ends={DIR: [int(longer), int(second)]})
    _run(planner, raft)
    assert raft.machine.state.inputs.get(DIR) == int(end)
