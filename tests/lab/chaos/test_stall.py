"""How long merging stood still around a fault, from the monitor's marks of the furthest
merged end, and which faults the availability verdict judges."""

from __future__ import annotations

import pytest

from rt_lab.chaos.availability import judge_availability
from rt_lab.chaos.monitor import Mark, majority_end, stall_time
from rt_lab.chaos.nemesis import Injected
from rt_lab.chaos.schedule import Fault

pytestmark = pytest.mark.unit


def _marks(offsets: list[int | None], every: float = 1.0) -> list[Mark]:
    """One mark per ``every`` seconds, the furthest end at (session 1, roll 0, offset);
    None: no node's merged log could be read then."""
    return [(i * every, (1, 0, o)) for i, o in enumerate(offsets) if o is not None]


def test_a_stream_merging_all_along_stalls_one_interval() -> None:
    marks = _marks([1, 2, 3, 4, 5, 6, 7], every=0.2)
    assert stall_time(marks, 0.5, 0.9) == pytest.approx(0.2)


def test_the_longest_still_stretch_from_the_start_to_the_first_advance_after_the_end() -> None:
    #                 0  1  2  3  4  5  6  7  8  9
    marks = _marks([1, 2, 3, 3, 3, 3, 4, 5, 5, 6])
    # the fault from 2.5 s to 4.0 s: merging moved at 2, then not until 6
    assert stall_time(marks, 2.5, 4.0) == 3.5
    # a fault from 6.5 to 7.2: it moved at 7, then not until 9
    assert stall_time(marks, 6.5, 7.2) == 2.0


def test_unreadable_moments_are_skipped_and_going_back_is_no_advance() -> None:
    # nothing readable from 2 to 4 (a power loss); then the logs end lower (unsynced
    # bytes lost) and only the mark past the old furthest end counts as an advance
    marks = _marks([10, 11, None, None, None, 8, 11, 12])
    assert stall_time(marks, 1.5, 4.0) == 5.5


def test_a_new_roll_is_an_advance() -> None:
    marks: list[Mark] = [(0.0, (1, 0, 900)), (1.0, (1, 1, 64)), (2.0, (1, 1, 64))]
    assert stall_time(marks, 0.5, 0.6) == 0.5


def test_no_advance_after_the_fault_is_none() -> None:
    assert stall_time(_marks([1, 2, 2, 2]), 1.5, 2.5) is None


def test_a_stall_is_counted_up_to_the_next_faults_start_only() -> None:
    #                 0  1  2  3  4  5  6  7  8  9
    marks = _marks([1, 2, 3, 3, 3, 3, 3, 3, 3, 4])
    # a file cut at 2.5 s, a power loss from 3.5 s: merging moved again only at 9
    assert stall_time(marks, 2.5, 2.5, until=3.5) == 1.0  # from the cut to the power loss
    assert stall_time(marks, 2.5, 2.5, until=6.0) == 3.5  # still 3.5 s before the next
    assert stall_time(marks, 2.5, 2.5) == 6.5  # with no next fault: up to 9
    # merging moved before the next fault began: the bound changes nothing
    assert stall_time(marks, 2.5, 2.5, until=9.5) == 6.5
    # never moved again, the next fault began: counted up to it
    assert stall_time(_marks([1, 2, 2, 2]), 1.5, 2.5, until=3.5) == 2.0


def _injected(
    kind: str, target: str, variant: str, started: float, stall: float | None
) -> Injected:
    record = Injected(Fault(started, kind, target, variant, 2.0), started, started + 2.0)
    record.stall_s = stall
    record.moved_at = None if stall is None else started + 2.0 + 0.2
    record.recovery_s = None if stall is None else 0.5
    return record


def test_one_node_faults_are_judged_against_the_bound() -> None:
    verdict = judge_availability(
        [
            _injected("kill", "rt-1", "node", 10.0, 1.6),
            _injected("disk-full", "rt-2", "", 20.0, 8.5),  # the leader's full disk, before
            _injected("kill", "rt-1,rt-2", "node", 30.0, 9.0),  # a majority: not judged
            _injected("partition", "a|b via c", "bridge", 40.0, 9.0),  # not judged
            _injected("power-loss", "all", "", 50.0, 12.0),  # not judged
        ],
        2.0,
    )
    assert verdict.judged == 2 and verdict.worst_s == 8.5
    assert not verdict.ok
    assert verdict.violations == [
        "disk-full rt-2 for 2.0s at 20.0s: merging stood still 8.5s (bound 2.0s)"
    ]


def test_a_fault_during_the_one_before_s_recovery_is_not_judged() -> None:
    power = _injected("power-loss", "all", "", 10.0, 15.0)
    power.moved_at = 30.0  # merging moved again only 18 s after the power came back
    pause = _injected("pause", "rt-1", "node", 14.0, 14.0)  # began before that
    kill = _injected("kill", "rt-2", "node", 40.0, None)  # never moved again: judged
    verdict = judge_availability([power, pause, kill], 2.0)
    assert verdict.judged == 1
    assert verdict.violations == ["kill node rt-2 for 2.0s at 40.0s: merging never moved again"]


def test_a_fault_while_the_node_before_still_recovers_is_not_judged() -> None:
    """Merging moved again at once (the others went on), but the killed node took 9 s to
    be back: the leader's kill in between took two nodes, not one."""
    kill = _injected("kill", "rt-3", "node", 10.0, 0.3)
    kill.recovery_s = 9.0  # back and answering at 21.0
    leader = _injected("kill", "leader", "sequencer", 14.0, 7.0)
    later = _injected("pause", "leader", "node", 30.0, 2.5)  # all recovered by then
    verdict = judge_availability([kill, leader, later], 2.0)
    assert verdict.judged == 2
    assert verdict.violations == [
        "pause node leader for 2.0s at 30.0s: merging stood still 2.5s (bound 2.0s)"
    ]


def test_the_restart_after_each_undisturbed_power_loss_is_kept() -> None:
    first = _injected("power-loss", "all", "", 10.0, 5.0)
    first.moved_at = 14.5  # 2.5 s after the nodes were started (ended at 12.0)
    second = _injected("power-loss", "all", "", 20.0, 5.0)
    second.moved_at = 33.0  # after the next fault began: disturbed
    third = _injected("power-loss", "all", "", 30.0, 5.0)  # began before 33.0: unsettled
    fourth = _injected("power-loss", "all", "", 50.0, 5.0)
    fourth.moved_at = 53.1
    verdict = judge_availability([first, second, third, fourth], 2.0)
    assert verdict.restart_s == [2.5, 1.1]
    assert verdict.judged == 0 and verdict.ok


def test_the_stream_ends_where_a_majority_of_merged_logs_end() -> None:
    # rt-1's full disk let it append part of a record it then cut off: 900 for a moment
    assert majority_end([(1, 3, 900), (1, 3, 500), (1, 3, 480)], 3) == (1, 3, 500)
    assert majority_end([(1, 4, 10), (1, 3, 500)], 3) == (1, 3, 500)  # one node unread
    assert majority_end([(1, 4, 10)], 3) is None  # no majority read: no mark
    assert majority_end([(1, 2, 7), (1, 2, 9), (1, 2, 8), (1, 2, 1), (1, 1, 0)], 5) == (1, 2, 7)
    assert majority_end([(2, 0, 5)], 1) == (2, 0, 5)
