"""How long merging stood still around a fault, from the monitor's samples."""

from __future__ import annotations

import pytest

from rt_lab.chaos.monitor import Sample, stall_time

pytestmark = pytest.mark.unit


def _samples(seqs: list[int | None]) -> list[Sample]:
    """One sample a second; None: no node answered."""
    return [
        Sample(float(t), "rt-1" if s is not None else None, {}, {"rt-1": s} if s else {}, 0)
        for t, s in enumerate(seqs)
    ]


def test_a_stream_merging_all_along_stalls_one_interval() -> None:
    samples = _samples([1, 2, 3, 4, 5, 6, 7])
    assert stall_time(samples, 2.5, 4.5) == 1.0


def test_the_longest_still_stretch_from_the_start_to_the_first_advance_after_the_end() -> None:
    #                   0  1  2  3  4  5  6  7  8  9
    samples = _samples([1, 2, 3, 3, 3, 3, 4, 5, 5, 6])
    # the fault from 2.5 s to 4.0 s: merging moved at 2, then not until 6
    assert stall_time(samples, 2.5, 4.0) == 3.5
    # a fault from 6.5 to 7.2: it moved at 7, then not until 9
    assert stall_time(samples, 6.5, 7.2) == 2.0


def test_samples_no_node_answered_are_skipped_and_restarts_do_not_count() -> None:
    # every node down from 2 to 4 (a power loss); a node back at 5 with less merged
    samples = _samples([10, 11, None, None, None, 8, 11, 12])
    assert stall_time(samples, 1.5, 4.0) == 5.5  # from 1.5 to the advance to 12 at 7


def test_no_advance_after_the_fault_is_none() -> None:
    assert stall_time(_samples([1, 2, 2, 2]), 1.5, 2.5) is None
