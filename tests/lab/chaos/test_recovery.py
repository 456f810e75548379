"""How long the stream took to move again after a fault was undone."""

from __future__ import annotations

import pytest

from rt_lab.chaos.monitor import Sample, recovery_time

pytestmark = pytest.mark.unit

NODES = ["rt-1", "rt-2", "rt-3"]


def _sample(t: float, leader: str | None, commits: list[int], merged_bytes: int) -> Sample:
    """Each node answering has merged as far as it has committed."""
    answering = dict(zip(NODES, commits, strict=False))
    return Sample(t, leader, answering, dict(answering), merged_bytes)


def test_recovered_when_the_merged_log_grows_again_under_load() -> None:
    samples = [
        _sample(9.0, "rt-1", [10, 10, 10], 1000),
        _sample(10.0, None, [10, 10], 1000),  # healed at 10.0; rt-3 still silent
        _sample(11.0, "rt-1", [10, 10, 9], 1000),  # all answer, nothing merged yet
        _sample(12.0, "rt-1", [14, 13, 12], 1500),  # merged past the mark
    ]
    assert recovery_time(samples, 10.0, 3) == 2.0


def test_pruning_that_shrinks_the_merged_bytes_does_not_hide_a_recovery() -> None:
    samples = [
        _sample(9.0, "rt-1", [10, 10, 10], 9000),
        _sample(10.0, None, [10, 10], 9000),  # healed at 10.0
        _sample(11.0, "rt-1", [12, 11, 11], 2000),  # the archiver pruned; it merged on
    ]
    assert recovery_time(samples, 10.0, 3) == 1.0


def test_recovered_when_every_node_has_caught_up_and_nothing_more_comes() -> None:
    """A fault undone after the publishers stopped: the log cannot grow; the stream has
    recovered once all nodes agree."""
    samples = [
        _sample(99.0, "rt-2", [50, 50], 9000),
        _sample(100.0, "rt-2", [50, 50, 41], 9000),  # healed at 100.0; rt-3 behind
        _sample(101.0, "rt-2", [50, 50, 47], 9000),
        _sample(102.0, "rt-2", [50, 50, 50], 9000),
    ]
    assert recovery_time(samples, 100.0, 3) == 2.0


def test_never_recovered_without_a_leader() -> None:
    samples = [_sample(t, None, [5, 5, 5], 100) for t in (10.0, 11.0, 12.0)]
    assert recovery_time(samples, 10.0, 3) is None
