"""Planning a read: slices at record boundaries, limits, big files split (no Spark here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_appliance import Position, Publisher, Subscriber
from rt_appliance.spark.plan import earliest, plan

pytestmark = pytest.mark.unit


def big_log(root: Path, count: int = 60_000) -> Path:
    with Publisher(root, "ticks", "pub-1") as pub:
        for start in range(0, count, 5000):
            pub.publish_batch([b"x" * 150] * 5000, ids=list(range(start + 1, start + 5001)))
    return root / "ticks.pub-1"


def test_a_big_file_is_split_into_contiguous_slices(tmp_path: Path) -> None:
    log = big_log(tmp_path)
    found = plan(log, earliest(log), split_bytes=4 << 20)
    assert len(found.slices) >= 2
    assert sum(s.records for s in found.slices) == found.records == 60_000
    for before, after in zip(found.slices, found.slices[1:], strict=False):
        assert before.end == after.start
    boundaries = {int(m.position) for m in Subscriber(log).read()}
    assert all(s.start in boundaries for s in found.slices[1:])
    assert found.end == Subscriber(log).end_position()


def test_limits_end_at_a_record_boundary(tmp_path: Path) -> None:
    log = big_log(tmp_path, 10_000)
    messages = list(Subscriber(log).read())
    by_rows = plan(log, earliest(log), max_records=1234)
    assert by_rows.records == 1234 and by_rows.end == messages[1233].next_position
    by_bytes = plan(log, messages[99].next_position, max_bytes=178 * 10)
    assert by_bytes.records == 10 and by_bytes.end == messages[109].next_position
    huge = plan(log, earliest(log), max_bytes=1)  # one record always goes through
    assert huge.records == 1
    bounded = plan(log, earliest(log), end=messages[499].next_position)
    assert bounded.records == 500
    assert plan(log, bounded.end, end=bounded.end).records == 0


def test_an_empty_directory_plans_nothing(tmp_path: Path) -> None:
    assert earliest(tmp_path) == Position.ZERO
    assert plan(tmp_path, Position.ZERO).records == 0
