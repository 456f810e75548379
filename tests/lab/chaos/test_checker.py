"""The chaos checker's categories, on histories written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_lab.chaos.apps import restart_position, resume_point
from rt_lab.chaos.checker import (
    Verdict,
    compare_files,
    count_unacked,
    judge_copies,
    judge_logs,
    judge_reader,
    judge_slice,
)
from rt_lab.chaos.history import read_delivered, read_journal

pytestmark = pytest.mark.unit


def _journal(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_journal_says_what_was_tried_and_acknowledged(tmp_path: Path) -> None:
    # incarnation 1 acked 1..4, tried 5..6 and died; incarnation 2 acked 1..2; a torn line
    text = "S 1\nT 1 2\nK 2\nT 3 4\nK 4\nT 5 6\nS 2\nT 1 2\nK 2\nT 3"
    history = read_journal(_journal(tmp_path, "p", text), "t1", "pub-1")
    assert history.incarnations == 2
    assert history.attempted == [f"pub-1:1:{n}" for n in range(1, 7)] + ["pub-1:2:1", "pub-1:2:2"]
    assert history.acked == {f"pub-1:1:{n}" for n in range(1, 5)} | {"pub-1:2:1", "pub-1:2:2"}
    assert resume_point(text.splitlines()) == (3, 4)


def _history(tmp_path: Path, host: str, text: str, topic: str = "t1"):  # type: ignore[no-untyped-def]
    return read_journal(_journal(tmp_path, host, text), topic, host)


def test_lost_duplicated_and_reordered_are_violations(tmp_path: Path) -> None:
    h = _history(tmp_path, "pub-1", "S 1\nT 1 4\nK 4\nT 5 5\n")
    got = [("t1", "pub-1", f"pub-1:1:{n}") for n in (1, 3, 2, 3)]
    verdict = Verdict()
    judge_reader(verdict, "rt-1", got, [h])
    assert verdict["lost"].count == 1 and "pub-1:1:4" in verdict["lost"].examples[0]
    assert verdict["duplicated"].count == 1
    assert verdict["reordered"].count == 1
    count_unacked(verdict, got, [h])
    assert (verdict.attempted, verdict.acked, verdict.unacked_lost) == (5, 4, 1)
    assert not verdict.safe


def test_unacknowledged_messages_may_be_lost_or_delivered(tmp_path: Path) -> None:
    h = _history(tmp_path, "pub-1", "S 1\nT 1 2\nK 2\nT 3 4\n")
    got = [("t1", "pub-1", f"pub-1:1:{n}") for n in (1, 2, 3)]
    verdict = Verdict()
    judge_reader(verdict, "rt-1", got, [h])
    count_unacked(verdict, got, [h])
    assert verdict.safe
    assert (verdict.unacked_delivered, verdict.unacked_lost) == (1, 1)


def test_a_dedup_pair_must_deliver_each_id_once_in_order(tmp_path: Path) -> None:
    a = _history(tmp_path, "pub-a", "S 1\nT 1 3\nK 3\n", "q.dedup")
    b = _history(tmp_path, "pub-b", "S 1\nT 1 2\nK 2\nT 3 4\nK 4\n", "q.dedup")
    good = [("q.dedup", "pub-a", "1"), ("q.dedup", "pub-b", "2"), ("q.dedup", "pub-a", "3")]
    good.append(("q.dedup", "pub-b", "4"))
    verdict = Verdict()
    judge_reader(verdict, "rt-1", good, [a, b])
    assert verdict.safe
    twice = [*good, ("q.dedup", "pub-a", "2")]
    verdict = Verdict()
    judge_reader(verdict, "rt-1", twice, [a, b])
    assert verdict["dedup"].count == 1 and verdict["reordered"].count == 1
    verdict = Verdict()
    judge_reader(verdict, "rt-1", good[:3], [a, b])
    assert verdict["lost"].count == 1 and "id 4" in verdict["lost"].examples[0]


def test_a_subscriber_that_delivered_something_else_diverges() -> None:
    log = [("t1", "pub-1", "a"), ("t1", "pub-1", "b")]
    verdict = Verdict()
    judge_copies(verdict, "rt-1", {"rt-1": log, "app-sub-1": log, "app-sub-2": log[:1]})
    assert verdict["divergent"].count == 1
    assert verdict["divergent"].examples[0].startswith("app-sub-2")


def test_a_log_behind_is_not_a_log_that_differs() -> None:
    full = {"log.1.0": b"abcdef", "log.1.1": b"ghij"}
    assert compare_files(full, full) is None
    assert compare_files({"log.1.0": b"abcdef", "log.1.1": b"gh"}, full) == "behind"
    assert compare_files({"log.1.0": b"abc"}, full) == "behind"
    assert compare_files({}, full) == "behind"
    assert compare_files({"log.1.0": b"abc", "log.1.1": b"ghij"}, full) == "log.1.0"  # a hole
    assert compare_files({"log.1.0": b"abXdef"}, full) == "log.1.0"
    verdict = Verdict()
    logs = {"rt-1": full, "rt-2": {"log.1.0": b"abc"}, "rt-3": {"log.1.0": b"abXdef"}}
    assert judge_logs(verdict, logs) == ["rt-2"]
    assert verdict["divergent"].count == 1 and "rt-3" in verdict["divergent"].examples[0]


def test_a_log_whose_oldest_files_were_pruned_is_not_a_log_that_differs() -> None:
    full = {"log.1.0": b"ab", "log.1.1": b"cd", "log.1.2": b"ef"}
    pruned = {"log.1.1": b"cd", "log.1.2": b"ef"}
    assert compare_files(pruned, full) is None
    assert compare_files(full, pruned) is None  # the furthest log may be the pruned one
    assert compare_files({"log.1.1": b"cd", "log.1.2": b"e"}, full) == "behind"
    assert compare_files({"log.1.1": b"cd", "log.1.3": b"gh"}, full) == "log.1.3"  # a hole
    assert compare_files({"log.1.2": b"eX"}, full) == "log.1.2"
    verdict = Verdict()
    assert judge_logs(verdict, {"rt-1": full, "rt-2": pruned, "sub-1": {"log.1.2": b"ef"}}) == []
    assert verdict.safe


def test_a_merged_log_must_be_one_unbroken_run_of_what_the_subscribers_delivered() -> None:
    """The subscriber applications delivered everything from the first message on; a
    node's log may have lost its oldest files to the archiver, or be behind."""
    app = [("t1", "pub-1", str(i)) for i in range(10)]
    for node_log in (app, app[4:], app[:7], app[4:7], []):
        verdict = Verdict()
        judge_slice(verdict, "rt-1", node_log, "app-sub-1", app)
        assert verdict.safe, node_log
    for node_log, expected in (
        (app[4:6] + app[7:], "message #7"),  # one missing in the middle
        ([*app[4:6], app[5], *app[6:]], "message #7"),  # one twice
        ([("t1", "pub-1", "x"), *app], "its first message"),  # one never delivered
    ):
        verdict = Verdict()
        judge_slice(verdict, "rt-1", node_log, "app-sub-1", app)
        assert verdict["divergent"].count == 1, node_log
        assert expected in verdict["divergent"].examples[0]


def test_a_subscriber_restarts_after_its_last_whole_batch(tmp_path: Path) -> None:
    journal = tmp_path / "sub"
    journal.write_text("D t1 pub-1 a\nP 100\nD t1 pub-1 b\nP 200\nD t1 pub-1 c\nP 3")
    assert restart_position(journal) == 200
    assert journal.read_text().endswith("P 200\n")
    assert read_delivered(journal) == [("t1", "pub-1", "a"), ("t1", "pub-1", "b")]
    assert restart_position(tmp_path / "none") == 0
