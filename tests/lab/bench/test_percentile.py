"""percentile: linear interpolation between the sorted values (numpy's default)."""

from __future__ import annotations

import random
import statistics

import pytest

from rt_lab.bench.stats import percentile

pytestmark = pytest.mark.unit


def test_between_two_values_it_interpolates() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4], 25) == 1.75
    assert percentile([1, 2, 3, 4], 75) == 3.25
    assert percentile([10, 20], 50) == 15.0


def test_the_ends_are_the_smallest_and_largest_value() -> None:
    assert percentile([7, 3, 9], 0) == 3.0
    assert percentile([7, 3, 9], 100) == 9.0
    assert percentile([5], 0) == percentile([5], 50) == percentile([5], 100) == 5.0


def test_on_a_value_it_is_that_value() -> None:
    values = list(range(101))  # 0..100: the p-th percentile is p
    random.Random(1).shuffle(values)
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(range(1, 6), 50) == 3.0


def test_p99_of_1000_latencies() -> None:
    # at index 0.99 * 999 = 989.01, between the 990th and 991st value
    assert percentile(range(1, 1001), 99) == pytest.approx(990.01)


def test_p50_is_the_median() -> None:
    rng = random.Random(2)
    values = [rng.random() for _ in range(1000)]
    assert percentile(values, 50) == pytest.approx(statistics.median(values))


def test_no_values_or_a_percentile_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)
    with pytest.raises(ValueError):
        percentile([1, 2], -1)
