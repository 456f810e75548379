"""check_merged on hand-built merged logs: identical or not, every message once, in order."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from rt_appliance import Message
from rt_appliance.log.format import FILE_KIND_MERGED, RECORD_HEADER, RangeHeader, encode_range
from rt_appliance.log.writer import LogWriter
from rt_lab.testing.checkers import (
    assert_clean,
    check_merged,
    compare_logs,
    log_digest,
)
from tests.helpers import flip_byte
from tests.integration.test_merged_log import SOURCES, publisher_logs, record_bytes

pytestmark = pytest.mark.integration

Plan = list[tuple[int, int, int]]  # (source index, first message, end message)
IN_ORDER: Plan = [(0, 0, 5), (1, 0, 12), (0, 5, 30), (1, 12, 30)]
EXPECTED_IDS = {source: list(range(1, 31)) for source in SOURCES}


def build(root: Path, name: str, plan: Plan, logs: dict[tuple[str, str], list[Message]]) -> Path:
    """A merged log of ``plan``'s ranges; the same plan gives the same bytes."""
    merged = root / name
    writer = LogWriter(
        merged,
        kind=FILE_KIND_MERGED,
        topic="stream",
        host="rt",
        roll_bytes=1 << 20,
        clock_ns=lambda: 1_700_000_000_000_000_000,
    )
    for seq, (which, start, end) in enumerate(plan):
        topic, host = SOURCES[which]
        source = logs[(topic, host)]
        chunk = record_bytes(source, root / "pub" / f"{topic}.{host}", start, end)
        header = RangeHeader(topic, host, source[start].position, len(chunk), end - start)
        announce = encode_range(header, 1, seq)
        sizes = [len(announce)] + [RECORD_HEADER.size + len(m.payload) for m in source[start:end]]
        writer.append(announce + chunk, sizes)
    writer.close()
    return merged


@pytest.fixture
def logs(tmp_path: Path) -> dict[tuple[str, str], list[Message]]:
    return publisher_logs(tmp_path)


def test_identical_logs_with_every_message_are_clean(
    tmp_path: Path, logs: dict[tuple[str, str], list[Message]]
) -> None:
    dirs = {n: build(tmp_path, n, IN_ORDER, logs) for n in ("rt-1", "rt-2", "rt-3")}
    report = check_merged(dirs, EXPECTED_IDS, timeout_s=5)
    assert_clean(report)
    assert report.settled and report.identical and len(set(report.digests.values())) == 1
    assert report.digests["rt-1"] == log_digest(dirs["rt-1"])
    assert (report.delivery.published, report.delivery.delivered) == (60, 60)
    payloads = {s: [m.payload for m in ms] for s, ms in logs.items()}
    assert check_merged(dirs, payloads, timeout_s=5).clean  # payloads instead of ids
    assert "identical" in report.describe()


def test_a_node_behind_converges_within_the_deadline(
    tmp_path: Path, logs: dict[tuple[str, str], list[Message]]
) -> None:
    full = build(tmp_path, "rt-1", IN_ORDER, logs)
    behind = build(tmp_path, "rt-2", IN_ORDER[:2], logs)
    now = compare_logs({"rt-1": full, "rt-2": behind})
    assert not now.identical
    assert "rt-2 is behind" in now.differences[0]

    def catch_up() -> None:
        time.sleep(0.5)  # the lagging node, some time later
        shutil.rmtree(behind)
        shutil.copytree(full, behind)

    thread = threading.Thread(target=catch_up)
    thread.start()
    report = check_merged({"rt-1": full, "rt-2": behind}, EXPECTED_IDS, timeout_s=10)
    thread.join()
    assert_clean(report)
    assert report.waited_s >= 0.4


def test_diverging_and_lagging_logs_are_reported(
    tmp_path: Path, logs: dict[tuple[str, str], list[Message]]
) -> None:
    good = build(tmp_path, "rt-1", IN_ORDER, logs)
    bad = tmp_path / "rt-2"
    shutil.copytree(good, bad)
    flip_byte(bad / "log.1.0", 500)
    missing_dir = tmp_path / "rt-3"  # a node that never merged anything
    report = check_merged(
        {"rt-1": good, "rt-2": bad, "rt-3": missing_dir}, EXPECTED_IDS, timeout_s=0.3
    )
    assert not report.clean and not report.settled and report.missing == 0
    assert report.logs.differences == [
        "rt-2: log.1.0 diverges from rt-1 at byte 500",
        "rt-3: log.1.0 exists on rt-1 but not on rt-3",
    ]
    with pytest.raises(AssertionError, match="DIFFER"):
        assert_clean(report)


def test_missing_duplicated_and_reordered_messages_are_counted(
    tmp_path: Path, logs: dict[tuple[str, str], list[Message]]
) -> None:
    plan: Plan = [(0, 0, 5), (0, 0, 5), (1, 12, 30), (1, 0, 12), (0, 6, 30)]
    merged = build(tmp_path, "rt-1", plan, logs)
    copy = tmp_path / "sub-1"
    shutil.copytree(merged, copy)
    report = check_merged({"rt-1": merged}, EXPECTED_IDS, timeout_s=0.3, copies={"sub-1": copy})
    assert report.identical and not report.settled  # message 6 of quotes never arrives
    quotes, trades = (report.delivery.sources[f"{t}.{h}"] for t, h in SOURCES)
    assert (quotes.missing, quotes.duplicated, quotes.out_of_order) == (1, 5, 0)
    assert (trades.missing, trades.duplicated, trades.out_of_order) == (0, 0, 12)
    text = report.describe()
    assert "missing 1, duplicated 5, out of order 12" in text
    assert "quotes.pub-1: 6 (published #6) is missing" in text
    with pytest.raises(AssertionError, match="is missing"):
        assert_clean(report, context="daemon logs here")


def test_a_corrupt_merged_log_is_an_error_not_a_wait(
    tmp_path: Path, logs: dict[tuple[str, str], list[Message]]
) -> None:
    merged = build(tmp_path, "rt-1", IN_ORDER, logs)
    flip_byte(merged / "log.1.0", 200)
    started = time.monotonic()
    report = check_merged({"rt-1": merged}, EXPECTED_IDS, timeout_s=30)
    assert time.monotonic() - started < 10
    assert report.error is not None and "CorruptLogError" in report.error
    assert not report.clean


def test_a_first_node_left_behind_is_not_mistaken_for_lost_messages(
    tmp_path: Path, logs: dict[tuple[str, str], list[Message]]
) -> None:
    behind = build(tmp_path, "rt-1", IN_ORDER[:2], logs)
    full = build(tmp_path, "rt-2", IN_ORDER, logs)
    report = check_merged({"rt-1": behind, "rt-2": full}, EXPECTED_IDS, timeout_s=0.3)
    assert not report.clean and not report.settled
    assert report.read_from == "rt-2" and report.missing == 0
    [difference] = report.logs.differences
    assert re.fullmatch(r"rt-2: log\.1\.0 is \d+ bytes, \d+ on rt-1 \(rt-1 is behind\)", difference)
    assert "(read on rt-2)" in report.describe()
