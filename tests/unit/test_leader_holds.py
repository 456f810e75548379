"""The leader's view of every node's holds: a node not heard from yet holds everything,
for a while after the lead was taken; then only what was reported counts."""

from __future__ import annotations

from rt_appliance import Position
from rt_appliance.sequencer.holds import LeaderHolds

NODES = ["rt-1", "rt-2", "rt-3"]


def test_a_new_leader_holds_everything_until_every_node_reported() -> None:
    seen = LeaderHolds("rt-1", NODES, wait_s=10.0)
    seen.leading(100.0)
    assert seen.unreported() == ["rt-2", "rt-3"]
    assert seen.oldest_roll([], first_roll=2, now=101.0) == 2  # rt-2 and rt-3 unknown
    seen.report("rt-2", {"spark-pipeline": int(Position.of(1, 5, 0))})
    assert seen.oldest_roll([], first_roll=2, now=102.0) == 2  # rt-3 still unknown
    seen.report("rt-3", {})
    assert seen.oldest_roll([], first_roll=2, now=103.0) == 5  # rt-2's hold alone
    assert seen.oldest_roll([int(Position.of(1, 4, 9))], first_roll=2, now=103.0) == 4


def test_a_silent_node_stops_holding_after_the_wait() -> None:
    seen = LeaderHolds("rt-1", NODES, wait_s=10.0)
    seen.leading(100.0)
    seen.report("rt-2", {})
    assert seen.oldest_roll([], first_roll=0, now=109.9) == 0
    assert seen.oldest_roll([], first_roll=0, now=110.0) is None  # rt-3 is down: no hold known


def test_the_wait_starts_again_at_each_new_lead() -> None:
    seen = LeaderHolds("rt-1", NODES, wait_s=10.0)
    seen.leading(100.0)
    seen.leading(120.0)  # still leading: the lead began at 100
    assert seen.oldest_roll([], first_roll=3, now=120.0) is None
    seen.leading(None)  # lost the lead
    seen.leading(200.0)
    assert seen.oldest_roll([], first_roll=3, now=205.0) == 3


def test_reports_kept_from_an_earlier_lead_still_count() -> None:
    seen = LeaderHolds("rt-1", NODES, wait_s=10.0)
    seen.report("rt-2", {"p": int(Position.of(1, 7, 0))})
    seen.report("rt-3", {"p": int(Position.of(1, 6, 0))})
    seen.leading(50.0)
    assert seen.oldest_roll([], first_roll=1, now=50.0) == 6
