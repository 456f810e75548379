"""The newest committed merged records a node keeps for its pull connections."""

from __future__ import annotations

from rt_appliance.replicate.fresh import FreshRecords


def test_records_that_follow_each_other_go_out_together_within_the_limit() -> None:
    fresh = FreshRecords(keep_records=10, keep_bytes=1000)
    fresh.add(100, b"a" * 10, 2)
    fresh.add(110, b"b" * 20, 3)
    fresh.add(130, b"c" * 30, 1)
    fresh.add(200, b"d" * 5, 1)  # a gap before it: not part of the run from 100

    got = fresh.after(100, 1000)
    assert got is not None
    assert (got.position, got.end, got.records) == (100, 160, 6)
    assert got.data == b"a" * 10 + b"b" * 20 + b"c" * 30

    capped = fresh.after(100, 35)  # the third would pass the limit
    assert capped is not None
    assert (capped.end, capped.data, capped.records) == (130, b"a" * 10 + b"b" * 20, 5)

    middle = fresh.after(110, 1000)
    assert middle is not None and (middle.end, middle.records) == (160, 4)
    assert fresh.served == 3 + 2 + 2


def test_nothing_for_a_position_that_is_not_a_record_start_or_too_large() -> None:
    fresh = FreshRecords(keep_records=10, keep_bytes=1000)
    fresh.add(100, b"a" * 10, 1)
    assert fresh.after(105, 1000) is None  # inside the record
    assert fresh.after(110, 1000) is None  # where the next would start: not here yet
    assert fresh.after(100, 9) is None  # alone it is larger than a frame may carry
    assert fresh.served == 0


def test_the_oldest_go_first_by_count_and_by_bytes() -> None:
    fresh = FreshRecords(keep_records=3, keep_bytes=100)
    for i in range(5):
        fresh.add(i * 10, bytes([i]) * 10, 1)
    kept = [fresh.after(i * 10, 100) is not None for i in range(5)]
    assert kept == [False, False, True, True, True]

    by_bytes = FreshRecords(keep_records=100, keep_bytes=50)
    by_bytes.add(0, b"x" * 30, 1)
    by_bytes.add(30, b"y" * 30, 1)  # 60 bytes kept: the first goes
    assert by_bytes.after(0, 100) is None
    got = by_bytes.after(30, 100)
    assert got is not None and got.data == b"y" * 30
    by_bytes.add(60, b"z" * 51, 1)  # larger than all it may keep: not taken
    assert by_bytes.after(60, 100) is None
    assert by_bytes.added == 2


def test_a_record_is_taken_once() -> None:
    fresh = FreshRecords(keep_records=10, keep_bytes=1000)
    fresh.add(0, b"a" * 10, 1)
    fresh.add(0, b"b" * 10, 1)  # applied again (a replay): the first stays
    got = fresh.after(0, 100)
    assert got is not None and got.data == b"a" * 10
    assert fresh.added == 1
