"""The sequencer on real clusters: identical merged logs, failover, restarts, catch-up.

Every test ends with the same check: every node's merged log and the subscriber's
copy byte-identical, every published message exactly once, per-publisher order kept.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from rt_appliance.log.segments import list_files
from rt_lab.testing.checkers import compare_logs, log_files
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TWO = {"pub-1": ["trades"], "pub-2": ["quotes"]}


def _snapshot_seq(path: Path) -> int:
    """The merged seq a node's raft snapshot holds (-1: none yet, or being replaced)."""
    try:
        return int(json.loads(path.read_text())["state"]["state"]["seq"])
    except (OSError, ValueError, KeyError):
        return -1


def committed_seq(stream, node: str) -> int:  # type: ignore[no-untyped-def]
    for n in stream.status()["nodes"]:
        if n["name"] == node and n["reachable"]:
            return int(n["committed_seq"])
    return -1


def merging_under_load(local_stream, rate: int = 300) -> tuple[LocalStream, str, list[Feed]]:  # type: ignore[no-untyped-def]
    """A started 3-node stream of :data:`TWO` publishers, each fed ``rate`` msg/s from a
    thread; returns it, its leader and the feeds once that leader has merged."""
    stream: LocalStream = local_stream(nodes=3, publishers=TWO, extra=SMALL).start()
    leader = stream.wait_leader()
    feeds = [
        Feed(stream, "pub-1", "trades").start(rate),
        Feed(stream, "pub-2", "quotes").start(rate),
    ]
    wait_until(lambda: committed_seq(stream, leader) > 5, 30, "merging under load")
    return stream, leader, feeds


@pytest.mark.parametrize("nodes", [3, 5])
def test_nodes_merge_two_publishers_identically(local_stream, nodes: int) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=nodes, publishers=TWO, extra=SMALL).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.publish(1, 20_000)
    check_stream(stream, feeds)
    status = stream.status()
    digests = {n["digest"] for n in status["nodes"]}
    assert len(digests) == 1 and None not in digests
    assert {n["merged_seq"] for n in status["nodes"]} == {status["nodes"][0]["committed_seq"]}


def test_leader_killed_under_load(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL).start()
    old = stream.wait_leader()
    feeds = [
        Feed(stream, "pub-1", "trades").start(2000),
        Feed(stream, "pub-2", "quotes").start(2000),
    ]
    wait_until(lambda: committed_seq(stream, old) > 5, 30, "merging under load")
    stream.kill_node(old)
    new = stream.wait_leader(not_in=[old])
    before = committed_seq(stream, new)
    wait_until(lambda: committed_seq(stream, new) > before, 30, "merging to resume")
    stream.start_node(old)
    target = committed_seq(stream, new)  # still publishing: the restarted node catches up
    wait_until(lambda: committed_seq(stream, old) >= target, 30, "the old leader to catch up")
    for f in feeds:
        f.stop()
    check_stream(stream, feeds)


def two_feeds_merged(local_stream, last: int):  # type: ignore[no-untyped-def]
    """A 3-node stream with two publishers, ids 1..``last`` published by each and merged
    on every node; returns the stream and its feeds."""
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.publish(1, last)
    check_stream(stream, feeds)
    return stream, feeds


def test_full_cluster_restart_continues_the_same_log(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream, feeds = two_feeds_merged(local_stream, 5000)
    first = {p.name: p.read_bytes() for p in stream.merged_dir("rt-1").glob("log.*")}
    term_before = max(n["term"] for n in stream.quick_status()["nodes"] if n["reachable"])
    for node in stream.node_names:
        stream.kill_node(node)
    for node in stream.node_names:
        stream.start_node(node)
    stream.wait_leader()
    # raft's term survives the restart (saved with the vote): it never goes back, and every node
    # learns the new election's term (a follower may hear of it a moment after the leader wins)
    assert term_before >= 1

    def terms() -> list[int]:
        return [n["term"] for n in stream.quick_status()["nodes"] if n["reachable"]]

    wait_until(
        lambda: len(terms()) == 3 and min(terms()) > term_before, 30, "every node in a new term"
    )
    for f in feeds:
        f.publish(5001, 10_000)
    check_stream(stream, feeds)
    for name, data in first.items():  # what was merged before the restart is unchanged
        assert (stream.merged_dir("rt-1") / name).read_bytes()[: len(data)] == data


def test_quorum_lost_pauses_and_quorum_back_resumes(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.publish(1, 2000)
    check_stream(stream, feeds)
    stream.kill_node("rt-2")
    stream.kill_node("rt-3")
    seq = committed_seq(stream, "rt-1")
    for f in feeds:
        f.publish(2001, 4000)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # without a quorum nothing is committed
        assert committed_seq(stream, "rt-1") == seq
        time.sleep(0.2)  # sampling through a fixed observation window
    stream.start_node("rt-2")
    stream.start_node("rt-3")
    check_stream(stream, feeds)


def test_node_down_for_long_catches_up_after_snapshots(local_stream) -> None:  # type: ignore[no-untyped-def]
    extra = {
        "sequencer": {
            "merged_roll_bytes": "1MiB",
            "max_range_bytes": "4KiB",
            "compaction_min_entries": 100,
            "compaction_min_s": 1,
        }
    }
    stream = local_stream(nodes=3, publishers=TWO, extra=extra).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.publish(1, 2000)
    check_stream(stream, feeds)
    held = committed_seq(stream, "rt-3")
    assert held > 0
    stream.kill_node("rt-3")
    for f in feeds:
        # many hundreds of raft entries: the leader keeps entries for rt-3 up to four
        # times compaction_min_entries, then compacts all the same
        f.publish(2001, 40_000)
    wait_until(  # whichever of them leads has compacted well past what rt-3 holds
        lambda: all(
            _snapshot_seq(stream.data_dir(n) / "raft" / "raft.snapshot") > held + 100
            for n in ("rt-1", "rt-2")
        ),
        60,
        f"a snapshot past seq {held + 100} on rt-1 and rt-2",
    )
    stream.start_node("rt-3")
    check_stream(stream, feeds, timeout_s=120)
    # the raft log it missed was compacted away: rt-3 copied merged records from a peer
    assert "copying merged log" in stream.node_daemon("rt-3").log()


def test_a_node_behind_what_the_stream_keeps_drops_it_and_catches_up(local_stream) -> None:  # type: ignore[no-untyped-def]
    """rt-3 is down while the others merge many files and the archiver prunes every
    one it holds. Restarted, it can never be given the records in between (no node
    keeps them, by a committed decision): it drops its files, copies from the others'
    oldest, and holds their files byte for byte."""
    extra = {
        "sequencer": {
            "merged_roll_bytes": "1MiB",
            "max_range_bytes": "16KiB",  # raft entries past what the leader keeps for rt-3
            "compaction_min_entries": 100,
            "compaction_min_s": 1,
        },
        "archiver": {"max_log_bytes": "3MiB", "interval_ms": 200},
    }
    stream = local_stream(nodes=3, publishers=TWO, extra=extra).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.payload_bytes = 200
        f.publish(1, 1000)
    wait_until(lambda: committed_seq(stream, "rt-3") > 0, 30, "rt-3 to merge something")
    held_seq = committed_seq(stream, "rt-3")
    stream.kill_node("rt-3")
    held = {f.path.name for f in list_files(stream.merged_dir("rt-3"))}
    for f in feeds:
        f.publish(1001, 30_000)  # about 12 MiB merged: the others keep the last 3 MiB

    def pruned_past_rt3() -> bool:
        kept = {f.path.name for f in list_files(stream.merged_dir("rt-1"))}
        return bool(kept) and not kept & held and len(kept) >= 2

    wait_until(pruned_past_rt3, 120, "rt-1 to prune every merged file rt-3 holds")
    wait_until(  # the raft log rt-3 missed is compacted away too
        lambda: all(
            _snapshot_seq(stream.data_dir(n) / "raft" / "raft.snapshot") > held_seq + 100
            for n in ("rt-1", "rt-2")
        ),
        60,
        "a snapshot on rt-1 and rt-2 past what rt-3 missed",
    )
    stream.start_node("rt-3")

    def same_as_rt1() -> bool:
        merged = stream.merged_dirs()
        try:
            return compare_logs(merged).identical and bool(log_files(merged["rt-3"]))
        except FileNotFoundError:  # the archiver pruned a file while it was read
            return False

    wait_until(same_as_rt1, 120, "rt-3 to hold the others' merged files byte for byte")
    assert "dropping" in stream.node_daemon("rt-3").log()


def test_an_unreadable_snapshot_stops_the_node_and_the_documented_rebuild_works(
    local_stream,  # type: ignore[no-untyped-def]
) -> None:
    """A node never runs from an empty state behind a journal that no longer starts at
    the beginning (pysyncobj would log the bad snapshot and go on, and the node would
    disagree with the others for good): it stops, saying why. docs/RECOVERY.md's rebuild
    then brings it back in step."""
    import shutil

    extra = {
        "sequencer": {**SMALL["sequencer"], "compaction_min_entries": 100, "compaction_min_s": 1}
    }
    stream = local_stream(nodes=3, publishers=TWO, extra=extra).start()
    stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.publish(1, 6000)
    raft = stream.data_dir("rt-3") / "raft"
    wait_until(lambda: (raft / "raft.snapshot").is_file(), 60, "a raft snapshot on rt-3")
    check_stream(stream, feeds)
    stream.kill_node("rt-3", signal.SIGTERM)
    (raft / "raft.snapshot").write_bytes(b"")  # what a power loss could leave of it
    node = stream.node_daemon("rt-3")
    node.start()
    assert node.proc is not None and node.proc.wait(60) == 1
    assert "raft snapshot unreadable" in node.log()

    for f in feeds:
        f.publish(6001, 8000)  # the others go on meanwhile
    data = stream.data_dir("rt-3")
    shutil.move(data / "raft", data / "raft.damaged")
    (data / "raft").mkdir()
    shutil.copy(data / "raft.damaged" / "raft.vote", data / "raft" / "raft.vote")
    shutil.move(data / "merged", data / "merged.damaged")
    stream.start_node("rt-3")
    check_stream(stream, feeds, timeout_s=120)
