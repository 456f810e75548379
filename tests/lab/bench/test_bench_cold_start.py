"""What ``rt bench cold-start`` makes of its options, of a node's log, and of its runs."""

from __future__ import annotations

import datetime as dt

import pytest

from rt_lab.bench.cold_start import (
    GIB,
    ColdStartFigures,
    Marks,
    OnDisk,
    Restart,
    find_marks,
    log_time,
    parse_sizes,
    space_needed,
)

pytestmark = pytest.mark.unit

STAMP = "2026-11-27 00:43:41,123"


def _epoch(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_sizes_come_repeated_or_as_comma_lists_smallest_first_once_each() -> None:
    assert parse_sizes(["10", "1, 0.5,", "1"]) == [0.5, 1.0, 10.0]
    assert space_needed([1.0, 10.0]) == int(2.2 * 10 * GIB)


@pytest.mark.parametrize("bad", [["x"], ["0"], ["-1"], [","], []])
def test_a_size_that_is_not_a_positive_number_is_refused(bad: list[str]) -> None:
    with pytest.raises(ValueError):
        parse_sizes(bad)


def test_a_log_line_stamp_is_read_to_the_millisecond() -> None:
    at = log_time(f"{STAMP} INFO rt_appliance.daemons.runner: node rt-3 starting")
    assert at == pytest.approx(_epoch(STAMP))
    assert at is not None and round(at % 1, 3) == 0.123
    assert log_time("Traceback (most recent call last):") is None


def test_the_marks_are_the_starting_line_and_the_ready_line_after_it() -> None:
    text = (
        "2026-11-27 00:43:40,000 INFO rt_appliance.daemons.notify: ready: stale line\n"
        "2026-11-27 00:43:41,100 INFO rt_appliance.daemons.runner: node rt-3 starting\n"
        "2026-11-27 00:43:41,200 INFO rt_appliance.sequencer.daemon: raft: listening\n"
        "2026-11-27 00:43:41,350 INFO rt_appliance.daemons.notify: ready: leader, term 2\n"
    )
    marks = find_marks(text, "rt-3")
    assert marks is not None
    assert marks.starting == pytest.approx(_epoch("2026-11-27 00:43:41,100"))
    assert marks.ready - marks.starting == pytest.approx(0.25)
    assert find_marks(text, "rt-1") is None  # another node's start


def test_a_ready_line_still_being_written_is_not_read() -> None:
    text = (
        "2026-11-27 00:43:41,100 INFO rt_appliance.daemons.runner: node rt-1 starting\n"
        "2026-11-27 00:43:41,350 INFO rt_appliance.daemons.notify: ready: lea"
    )
    assert find_marks(text, "rt-1") is None
    assert find_marks(text + "der\n", "rt-1") is not None


def test_a_restart_is_split_at_the_starting_line() -> None:
    restart = Restart.of(100.0, 1.25, Marks(starting=100.9, ready=101.2))
    assert restart.total_s == 1.25
    assert restart.to_starting_s == pytest.approx(0.9)
    assert restart.to_ready_s == pytest.approx(0.3)
    # a stamp is whole milliseconds: it may fall a little before the exec was timed
    assert Restart.of(100.0004, 0.5, Marks(100.0, 100.4)).to_starting_s == 0.0


def _figures(gib: float, clean_s: list[float]) -> ColdStartFigures:
    runs = [Restart(s, s * 0.8, s * 0.2) for s in clean_s]
    disk = OnDisk(1100 << 20, 2, 30 << 20, 1, 0)
    return ColdStartFigures(gib, disk, 20.0, {"clean": runs, "crash": runs[:1]})


def test_figures_are_medians_in_ms_with_min_and_max_and_the_target_at_1_gib() -> None:
    by_name = {r.name: r for r in _figures(1, [1.2, 0.9, 2.0]).results()}
    ready = by_name["1 GiB, after a clean stop (SIGTERM): exec to READY"]
    assert ready.unit == "ms" and ready.values == pytest.approx([1200, 900, 2000])
    assert ready.median == pytest.approx(1200)
    assert ready.target == "<= 1,500"
    assert ready.note == "min 900, max 2,000"
    split = by_name["1 GiB, after a clean stop (SIGTERM): exec to 'node rt-1 starting'"]
    assert split.median == pytest.approx(960)
    disk = by_name["1 GiB: merged log on disk"]
    assert disk.median == pytest.approx(1100)
    assert disk.note.startswith("2 files; node inputs (in/) 30 MiB in 1 file;")
    assert by_name["1 GiB, after a crash (SIGKILL): exec to READY"].values == [1200]


def test_the_verdict_is_on_the_median_and_only_up_to_1_gib() -> None:
    clean, crash = _figures(1, [1.2, 0.9, 2.0]).verdicts()
    assert "READY 1,200 ms after exec" in clean and clean.endswith(": met.")
    assert crash.startswith("- 1 GiB, after a crash (SIGKILL)")
    assert _figures(0.5, [1.6, 1.7, 1.4]).verdicts()[0].endswith(": missed.")
    assert _figures(10, [5.0]).verdicts() == []
    assert {r.target for r in _figures(10, [5.0]).results()} == {"-"}
