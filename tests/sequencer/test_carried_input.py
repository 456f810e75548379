"""Merges carry their input in the raft entry: a stream whose publishers reach only the
leader still merges, on every node alike.

The leader plans a range that no majority reported holding from its own copy, and puts
the bytes in the entry; committing the entry makes them durable on a majority (in their
raft journals), and every node's merger builds the merged record from them. Here the
publishers cannot reach the followers' push ports (their configuration names an
address where nothing listens), so the followers never hold any input: before entries
carried their input nothing was ever merged. Now every message is merged, every node's
merged log is identical, and the followers' ``in/`` stays empty.
"""

from __future__ import annotations

import urllib.request

import pytest

from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream
from tests.sequencer.test_cluster import TWO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOWHERE = ("127.0.0.98", "127.0.0.99")  # loopback addresses nothing listens on


def _reaching_only_the_leader(local_stream):  # type: ignore[no-untyped-def]
    """A 3-node stream whose publishers' push clients reach the leader alone; (stream,
    the leader's name)."""
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL)
    stream.start(push_clients=False)
    leader = stream.wait_leader()
    nowhere = iter(NOWHERE)
    nodes = [
        {"name": n.name, "host": n.host if n.name == leader else next(nowhere)}
        for n in stream.config.nodes
    ]
    for pub in stream.config.publishers:
        stream.set_view(pub.name, nodes)
        stream.publisher_daemon(pub.name).start()
    return stream, leader


def test_publishers_reaching_only_the_leader_are_merged_everywhere(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream, leader = _reaching_only_the_leader(local_stream)
    feeds = [Feed(stream, "pub-1", "trades").start(200), Feed(stream, "pub-2", "quotes").start(200)]
    wait_until(lambda: all(len(f.ids) >= 400 for f in feeds), 30, "400 messages each published")
    for f in feeds:
        f.stop()
    check_stream(stream, feeds)  # every id once, in order, every node's log identical

    assert stream.wait_leader() == leader, "the leadership moved: the test proves nothing"
    for node in stream.config.nodes:
        if node.name == leader:
            continue
        in_dir = stream.config.data_dir_of(node) / "in"
        held = [p.name for p in in_dir.iterdir()] if in_dir.exists() else []
        assert held == [], f"{node.name} received input it should not reach: {held}"
    node = stream.config.node(leader)
    url = f"http://{node.host}:{stream.config.ports.sequencer_metrics}/metrics"
    metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    carried = [
        line for line in metrics.splitlines() if line.startswith("rt_sequencer_carried_total ")
    ]
    assert carried and float(carried[0].split()[1]) > 0, metrics


def test_publishers_reaching_only_the_leader_are_merged_across_rolls_and_sessions(
    local_stream,  # type: ignore[no-untyped-def]
) -> None:
    """The leader moves on to an input's next file on its own push server's word: the
    sender moved on from the file there. No follower holds or reports any of it, so
    before, the stream stopped at the end of each publisher's first file."""
    stream, leader = _reaching_only_the_leader(local_stream)
    feeds = [
        Feed(stream, "pub-1", "trades", roll_bytes=4096),
        Feed(stream, "pub-2", "quotes", roll_bytes=4096),
    ]
    for f in feeds:
        f.payload_bytes = 200
        f.start(300)
    wait_until(lambda: all(len(f.ids) >= 300 for f in feeds), 30, "300 messages each published")
    for f in feeds:
        f.stop()
        f.publish(len(f.ids) + 1, len(f.ids) + 100)  # a new session: a new file
    for f in feeds:
        files = list(f.directory.glob(f"{f.topic}.{f.host}/log.*"))
        assert len({p.name.split(".")[1] for p in files}) == 2, "two sessions"
        assert len(files) >= 10, "the test needs rolls"
    check_stream(stream, feeds)  # every id once, in order, every node's log identical
    assert stream.wait_leader() == leader, "the leadership moved: the test proves nothing"
    for node in stream.config.nodes:
        in_dir = stream.config.data_dir_of(node) / "in"
        if node.name != leader:
            assert not in_dir.exists() or not list(in_dir.iterdir())
