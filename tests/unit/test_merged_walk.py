"""The scrubber's walk of a merged file, a stretch at a time.

A whole file walked at once held the merger's appends up for as long as the walk took:
a second for 4 MiB on a busy 2-core machine, the largest part of the stalls a single
node's fault caused in ``rt chaos`` (seed 149131534: 5 of 126 one-node faults over the
2 s bound). The walk now goes a bounded stretch per step and finds what a whole
walk finds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rt_appliance.log.scan as scan_module
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.merged_walk import MergedWalk
from rt_appliance.log.recovery import verify_file
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import Fetched
from rt_appliance.sequencer.merged import MergedLog
from rt_appliance.sequencer.scrub import Scrubber
from rt_appliance.sequencer.state import merged_header
from tests.helpers import flip_byte, merged_records

pytestmark = pytest.mark.unit

STREAM = "teststream"
SIZES = [100 + (i * 37) % 900 for i in range(200)]  # 200 merges, 200-1,000 bytes each


def _file(tmp_path: Path, sizes: list[int] = SIZES) -> Path:
    path = tmp_path / "log.1.0"
    path.write_bytes(merged_header(STREAM, 0, 1) + merged_records(sizes))
    return path


def _walk_all(path: Path, budget: int) -> tuple[MergedWalk, int]:
    walk, steps = MergedWalk(path), 0
    while not walk.done:
        walk.advance(budget)
        steps += 1
    return walk, steps


@pytest.fixture(params=["compiled", "python"])
def either_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled record walk, and the Python one a build without a compiler uses."""
    if request.param == "python":
        monkeypatch.setattr(scan_module, "_native", None)
    return str(request.param)


def test_a_whole_file_checks_out_to_its_end_in_steps_of_any_size(
    tmp_path: Path, either_walk: str
) -> None:
    path = _file(tmp_path)
    size = path.stat().st_size
    for budget in (1 << 30, 4096, 1):
        walk, steps = _walk_all(path, budget)
        assert (walk.problem, walk.at_end, walk.offset, walk.range_left) == ("", True, size, 0)
        assert steps >= size // (budget + 1100)  # a step goes past its budget by a record at most


def test_a_step_walks_about_its_budget_and_goes_on_where_it_stopped(tmp_path: Path) -> None:
    path = _file(tmp_path)
    walk = MergedWalk(path)
    first = walk.advance(8192)
    assert 8192 <= first < 8192 + 2048  # up to the record that crosses the budget
    assert not walk.done
    second = walk.advance(8192)
    assert 8192 <= second < 8192 + 2048
    assert walk.offset == len(merged_header(STREAM, 0, 1)) + first + second


def test_a_flipped_bit_stops_the_walk_where_a_whole_check_finds_it(
    tmp_path: Path, either_walk: str
) -> None:
    path = _file(tmp_path)
    flip_byte(path, path.stat().st_size * 2 // 3, 0x10)
    walk, _ = _walk_all(path, 4096)
    assert walk.problem
    report = verify_file(path)
    assert report.error is not None
    assert walk.offset == report.error.offset


def test_a_file_cut_inside_a_record_ends_the_walk_short_of_its_size(tmp_path: Path) -> None:
    path = _file(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole[:-50])
    walk, _ = _walk_all(path, 4096)
    assert (walk.problem, walk.at_end) == ("", True)
    assert walk.offset < path.stat().st_size
    assert walk.offset == verify_file(path).valid_bytes


def test_a_record_larger_than_the_budget_is_walked_whole(tmp_path: Path) -> None:
    path = _file(tmp_path, [100, 300_000, 100])
    walk, _ = _walk_all(path, 4096)
    assert (walk.problem, walk.offset) == ("", path.stat().st_size)


def test_a_bad_header_or_a_file_cut_behind_the_walk_is_a_problem(tmp_path: Path) -> None:
    path = _file(tmp_path)
    walk = MergedWalk(path)
    walk.advance(8192)
    path.write_bytes(path.read_bytes()[:1000])
    walk.advance(8192)
    assert "shorter than checked" in walk.problem
    flip_byte(path, 0)
    fresh = MergedWalk(path)
    fresh.advance(8192)
    assert fresh.problem.startswith("bad file header")


def test_a_range_record_must_begin_each_range(tmp_path: Path) -> None:
    path = _file(tmp_path, [200])
    header = len(merged_header(STREAM, 0, 1))
    first_range_length = int.from_bytes(path.read_bytes()[header + 4 : header + 8], "little")
    message_at = header + RECORD_HEADER.size + first_range_length
    path.write_bytes(path.read_bytes()[:header] + path.read_bytes()[message_at:])
    walk, _ = _walk_all(path, 4096)
    assert "where a range begins" in walk.problem


def _fetch_from(peer_file: Path):  # type: ignore[no-untyped-def]
    def fetch(peer: str, position: Position, max_bytes: int) -> Fetched:
        data = peer_file.read_bytes()
        return Fetched(position, data[position.offset : position.offset + max_bytes], len(data),
                       None, Position.of(1, 0, 0), missing=False)  # fmt: skip

    return fetch


def test_the_scrubber_walks_a_file_over_several_steps_and_repairs_damage_at_its_end(
    tmp_path: Path,
) -> None:
    whole = merged_header(STREAM, 0, 1) + merged_records(SIZES)
    peer = tmp_path / "peer" / "log.1.0"
    peer.parent.mkdir()
    peer.write_bytes(whole)
    local = tmp_path / "local"
    local.mkdir()
    (local / "log.1.0").write_bytes(whole)
    flip_byte(local / "log.1.0", len(whole) - 300, 0x01)  # in the last merge
    merged = MergedLog(local)
    merged.size = len(whole)
    scrubber = Scrubber(merged, _fetch_from(peer), ["rt-2"], interval_s=60.0)

    steps = [scrubber.step(budget=16384) for _ in range(len(whole) // 16384)]
    assert steps == [None] * len(steps)  # the walk has not reached the damage yet
    assert scrubber.damaged == 0 and scrubber.seconds_until_due() > 0
    damage = scrubber.step(budget=16384)

    assert damage is not None and damage.offset > len(whole) - 1500
    assert (local / "log.1.0").read_bytes() == whole
    assert (scrubber.damaged, scrubber.repaired) == (1, 1)
    assert scrubber.seconds_until_due() > 30  # the next file waits for the interval
    merged.close()
