"""A leader whose own copy of an input lacks what a majority holds plans from a peer's.

The leader's ``in/`` has nothing of the input; the followers' copies hold it over several
files, one record larger than a merge range among them. Once its copy has lacked that
for ``fetch_after_ms``, a step that may fetch reads the records from a follower's copy
(the fetcher stand-in answers with the pull server's own reading of the follower's
directory) and plans every record, crossing each file's end as the followers' reports
agree. Real input files on disk; raft is a stand-in that commits each proposal at once.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.config import load_config
from rt_appliance.errors import TransportError
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import Fetched, read_part
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.planner import Planner
from rt_lab.testing.cluster import write_local_config
from tests.unit.test_planner_file_ends import _CommitAtOnce

pytestmark = pytest.mark.unit

DIR = "trades.pub-1"
SMALL_MESSAGES, LARGE = 600, 6000  # bytes of the large record's payload (> a 4 KiB range)


class _Fetcher:
    """FETCH as a follower's pull server answers it, read from that follower's ``in/``;
    a node in ``down`` does not answer."""

    def __init__(self, copies: dict[str, Path]) -> None:
        self.copies, self.down, self.asked = copies, set[str](), list[str]()

    def fetch(
        self, node: str, dir: str, position: Position, max_bytes: int, timeout_s: float = 5.0
    ) -> Fetched:
        self.asked.append(node)
        if node in self.down:
            raise TransportError(f"FETCH from {node}: no answer in {timeout_s}s")
        assert dir.startswith("in/")
        return read_part(self.copies[node] / dir[3:], position, max_bytes)


def _stream(tmp_path: Path) -> tuple[Path, Path]:
    """The leader's empty ``in/`` and a follower's, with the input over several files."""
    with Publisher(tmp_path / "pub", "trades", "pub-1", roll_bytes=16 << 10) as pub:
        for i in range(SMALL_MESSAGES):
            pub.publish(f"trade {i:05d}".encode().ljust(100, b"."))
            if i == SMALL_MESSAGES // 2:
                pub.publish(b"L" * LARGE)
    leader, follower = tmp_path / "rt-1" / "in", tmp_path / "rt-2" / "in"
    leader.mkdir(parents=True)
    shutil.copytree(tmp_path / "pub" / DIR, follower / DIR)
    return leader, follower


def _planner(tmp_path: Path, fetcher: _Fetcher | None) -> tuple[Planner, _CommitAtOnce]:
    extra: dict[str, object] = {"sequencer": {"max_range_bytes": "4KiB", "fetch_after_ms": 0}}
    config = load_config(write_local_config(tmp_path, nodes=3, extra=extra))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    raft = _CommitAtOnce(machine)
    leader_in = tmp_path / "rt-1" / "in"
    planner = Planner(
        config,
        "rt-1",
        machine,
        Inputs(leader_in, sync=False),
        raft,  # type: ignore[arg-type]
        lambda: None,
        fetcher=fetcher,  # type: ignore[arg-type]
    )
    return planner, raft


def _plan(planner: Planner, follower: Inputs, may_fetch: bool) -> None:
    """Steps until nothing more is planned, both followers reporting rt-2's copy."""
    machine = planner.machine
    for _ in range(1000):
        with machine.cond:
            merged = dict(machine.state.inputs)
        for peer in ("rt-2", "rt-3"):
            planner.report(peer, follower.extents(), follower.file_ends(merged))
        if planner.step(may_fetch=may_fetch) == 0:
            return
    raise AssertionError("the planner never settled")


def test_every_record_is_planned_from_a_peers_copy(tmp_path: Path) -> None:
    _, follower_in = _stream(tmp_path)
    files = list_files(follower_in / DIR)
    assert len(files) >= 4, "the input should span several files"
    fetcher = _Fetcher({"rt-2": follower_in, "rt-3": follower_in})
    fetcher.down.add("rt-2")  # the first asked (they hold as much) does not answer
    planner, raft = _planner(tmp_path, fetcher)
    follower = Inputs(follower_in, sync=False)

    _plan(planner, follower, may_fetch=False)  # on the event loop: no fetch, but says so
    assert raft.merged_ids == 0 and planner.wants_fetch and fetcher.asked == []

    _plan(planner, follower, may_fetch=True)
    assert raft.merged_ids == SMALL_MESSAGES + 1, "every record, the large one too"
    end = Position(planner.machine.state.inputs[DIR])
    assert end == follower.extents()[DIR], "the plan ends where the follower's copy does"
    assert planner.from_peers > len(files), "ranges from every file, crossing each end"
    assert fetcher.asked[:2] == ["rt-2", "rt-3"], "the next peer asked at once"


def test_without_a_fetcher_the_leader_waits(tmp_path: Path) -> None:
    _, follower_in = _stream(tmp_path)
    planner, raft = _planner(tmp_path, None)
    _plan(planner, Inputs(follower_in, sync=False), may_fetch=True)
    assert raft.merged_ids == 0 and planner.from_peers == 0
