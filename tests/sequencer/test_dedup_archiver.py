"""Dedup topics (each message merged once, whoever delivers it) and the archiver's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rt_appliance.log.segments import list_files
from rt_appliance.subscribe import Subscriber
from rt_lab.testing.checkers import compare_logs
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEDUP = {"pub-1": ["quotes.dedup"], "pub-2": ["quotes.dedup"]}


def dedup_ids(merged: Path) -> list[int]:
    return [m.id for m in Subscriber(merged).read() if m.topic == "quotes.dedup"]


def settled_ids(stream, expected: list[int]) -> bool:  # type: ignore[no-untyped-def]
    dirs = dict(stream.merged_dirs())
    dirs["sub-1"] = stream.subscriber_dir("sub-1")
    try:
        return compare_logs(dirs).identical and dedup_ids(stream.merged_dir("rt-1")) == expected
    except FileNotFoundError:
        return False


def test_dedup_with_a_publisher_dying_midway_and_a_replay(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers=DEDUP, extra=SMALL).start()
    stream.wait_leader()
    one, two = Feed(stream, "pub-1", "quotes.dedup"), Feed(stream, "pub-2", "quotes.dedup")
    two.publish(1, 3000)  # pub-2 is ahead, then dies: its push client is killed
    one.publish(1, 1000)
    wait_until(lambda: settled_ids(stream, list(range(1, 3001))), 60, "pub-2's messages merged")
    stream.publisher_daemon("pub-2").kill()
    one.publish(1001, 6000)  # pub-1 delivers 1001..3000 again, and the rest
    wait_until(lambda: settled_ids(stream, list(range(1, 6001))), 60, "each id once")
    one.publish(4000, 7000)  # restarted from an earlier checkpoint: a replay
    wait_until(
        lambda: settled_ids(stream, list(range(1, 7001))), 60, "the replay adding nothing twice"
    )
    status = stream.status()
    assert {n["digest"] for n in status["nodes"]} == {status["nodes"][0]["digest"]}


ARCHIVE_RULES = {
    "max_log_bytes": {"max_log_bytes": "2MiB"},
    "retention": {"retention_minutes": 0.02},
    # always over the limit: every look prunes all but the newest file, so a subscriber
    # still reading the file before it at that moment (just after a roll) loses its
    # position, by design; looking once a second makes that unlikely in the test
    "disk": {"max_disk_usage_percent": 0.001, "interval_ms": 1000},
}


@pytest.mark.parametrize("rule", sorted(ARCHIVE_RULES))
def test_archiver_rule_prunes_everywhere(local_stream, rule: str) -> None:  # type: ignore[no-untyped-def]
    extra = {
        **SMALL,
        "archiver": {"interval_ms": 200, **ARCHIVE_RULES[rule]},
    }
    stream = local_stream(nodes=3, publishers={"pub-1": ["trades"]}, extra=extra).start()
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades", roll_bytes=256 << 10)
    feed.payload_bytes = 200
    # About 7 MB: 7 merged files of 1 MiB, paced so that the subscriber keeps up. The
    # archiver does not wait for subscribers: a subscriber a whole file behind (as a
    # burst can leave it) loses its position on every node, by design.
    feed.start(rate=8000)
    wait_until(lambda: len(feed.ids) >= 30_000, 60, "30,000 messages published")
    feed.stop()

    def pruned_everywhere() -> bool:
        dirs = dict(stream.merged_dirs())
        dirs["sub-1"] = stream.subscriber_dir("sub-1")
        files = {name: [f.roll for f in list_files(d)] for name, d in dirs.items()}
        rolls = set(map(tuple, files.values()))
        return len(rolls) == 1 and min(next(iter(rolls)), default=0) > 0

    def all_merged() -> bool:
        nodes = stream.quick_status()["nodes"]
        lags = [i["lag_bytes"] for n in nodes if n["reachable"] for i in n["inputs"].values()]
        return len(lags) == 3 and not any(lags)

    wait_until(all_merged, 120, "every input merged on every node")
    wait_until(pruned_everywhere, 60, f"the {rule} rule pruning on every node and the subscriber")
    newest = max(f.roll for f in list_files(stream.merged_dir("rt-1")))
    assert newest >= 5  # the newest file is never pruned
    for node in stream.node_names:
        lines = (stream.data_dir(node) / "log-history.jsonl").read_text().splitlines()
        entries = [json.loads(line) for line in lines]
        assert entries and all(e["pruned_below_roll"] > 0 for e in entries)
        assert any(e["removed"] for e in entries)
    # fully merged inputs are pruned too: only the files from the merge point on remain
    inputs = list_files(stream.input_dir("rt-1", "pub-1", "trades"))
    assert len(inputs) <= 2, [f.path.name for f in inputs]  # of about 26 publisher files

    def identical() -> bool:
        try:
            dirs = {**stream.merged_dirs(), "sub-1": stream.subscriber_dir("sub-1")}
            return compare_logs(dirs).identical
        except FileNotFoundError:
            return False

    wait_until(identical, 60, "the subscriber's copy to equal the nodes' merged logs")


def test_archiver_off_keeps_everything(local_stream) -> None:  # type: ignore[no-untyped-def]
    extra = {**SMALL, "archiver": {"interval_ms": 100, "prune_inputs": False}}
    stream = local_stream(nodes=1, publishers={"pub-1": ["trades"]}, extra=extra).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades")]
    feeds[0].publish(1, 20_000)
    check_stream(stream, feeds)
    assert list_files(stream.merged_dir("rt-1"))[0].roll == 0
    assert not (stream.data_dir("rt-1") / "log-history.jsonl").exists()
