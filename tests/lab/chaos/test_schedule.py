"""The schedule of ``rt chaos`` is a function of its seed and options only."""

from __future__ import annotations

import itertools

import pytest

from rt_lab.chaos.schedule import (
    FAULTS,
    WARMUP_S,
    draw_schedule,
    schedule_from_json,
    schedule_to_json,
)

pytestmark = pytest.mark.unit


def test_the_same_seed_gives_the_same_schedule() -> None:
    a = draw_schedule(42, 600, 5, list(FAULTS))
    b = draw_schedule(42, 600, 5, list(FAULTS))
    assert a == b
    assert len(a) > 20
    assert draw_schedule(43, 600, 5, list(FAULTS)) != a


def test_a_schedule_draws_only_the_faults_asked_and_covers_them() -> None:
    schedule = draw_schedule(1, 3600, 3, ["kill", "partition"])
    assert {f.kind for f in schedule} == {"kill", "partition"}
    shapes = {f.variant for f in schedule if f.kind == "partition"}
    assert shapes == {"halves", "minority", "lone-leader", "bridge", "one-way"}


def test_faults_follow_one_another_and_leave_time_to_recover() -> None:
    schedule = draw_schedule(7, 120, 3, list(FAULTS))
    assert schedule[0].at_s == WARMUP_S
    for before, after in itertools.pairwise(schedule):
        assert after.at_s >= before.end_s + 1.0
    assert schedule[-1].end_s <= 120 - 12


def test_partition_targets_name_real_nodes_and_split_them() -> None:
    for fault in draw_schedule(3, 3600, 5, ["partition"]):
        if fault.variant in ("halves", "bridge"):
            sides = fault.target.split(" via ")[0].split("|")
            a, b = (set(s.split(",")) for s in sides)
            assert a and b and not a & b
            assert a | b <= {f"rt-{i}" for i in range(1, 6)}
            if fault.variant == "halves":
                assert len(a | b) == 5 and len(a) == 2


def test_a_schedule_survives_json() -> None:
    schedule = draw_schedule(9, 300, 3, list(FAULTS))
    assert schedule_from_json(schedule_to_json(schedule)) == schedule


def test_unknown_faults_and_partitions_of_too_few_nodes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        draw_schedule(1, 60, 3, ["meteor"])
    with pytest.raises(ValueError, match="at least 3 nodes"):
        draw_schedule(1, 60, 1, ["partition"])
