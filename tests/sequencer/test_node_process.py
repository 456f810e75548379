"""``rt node``: the push server, the sequencer and the pull server of a node in one process.

A kill -9 of the process loses nothing acknowledged; a subscriber connection that stalls
does not hold up raft, merging or the other connections; one metrics endpoint carries
the three servers' metrics."""

from __future__ import annotations

import asyncio
import re
import threading
import urllib.request

import pytest

from rt_appliance.position import Position
from rt_appliance.transport.messages import FrameType
from rt_appliance.transport.session import connect
from rt_appliance.transport.tls import client_context
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def metrics(stream, node: str) -> str:  # type: ignore[no-untyped-def]
    host, port = stream.config.node(node).host, stream.config.ports.sequencer_metrics
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def gauge(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} missing"
    return float(found.group(1))


def test_one_process_per_node_with_every_metric(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3).start()
    stream.wait_leader()
    assert stream.node_daemon("rt-1").name == "sequencer-rt-1"
    assert stream.node_daemon("rt-1").args[0] == "node"
    feed = Feed(stream, "pub-1", "trades")
    feed.publish(1, 2000)
    check_stream(stream, [feed])
    # the push server's byte counter has a series once bytes came in: the push client
    # may reach rt-1 after the others have merged everything (it backs off while rt-1
    # starts), and rt-1 merges from its peers' copies meanwhile
    wait_until(
        lambda: re.search("^rt_push_server_bytes_total", metrics(stream, "rt-1"), re.M),
        30,
        "rt-1's push server to receive bytes",
    )
    text = metrics(stream, "rt-1")
    for name in (  # the sequencer's, the push server's and the pull server's
        "rt_sequencer_is_leader",
        "rt_sequencer_loop_lag_seconds",
        "rt_push_server_bytes_total",
        "rt_pull_server_connections",
    ):
        assert re.search(rf"^{name}", text, re.M), f"{name} missing from rt node's metrics"


def test_kill_9_of_a_node_process_loses_nothing_acknowledged(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra=SMALL).start()
    leader = stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades").start(3000)
    wait_until(lambda: len(feed.ids) > 5000, 30, "publishing under way")
    stream.kill_node(leader)  # the whole node, mid-stream: push, raft and pull at once
    stream.wait_leader(not_in=[leader])
    wait_until(lambda: len(feed.ids) > 15000, 60, "publishing on without the old leader")
    stream.start_node(leader)
    feed.stop()
    check_stream(stream, [feed], timeout_s=120)  # every id once, in order, logs identical


def test_a_stalled_subscriber_does_not_hold_up_the_node(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra=SMALL).start()
    leader = stream.wait_leader()
    config = stream.config
    stalled = threading.Event()
    done = threading.Event()

    async def never_reads() -> None:  # pulls the whole log from the leader, reads nothing
        conn, _ = await connect(
            config.node(leader).host,
            config.ports.pull,
            client_context(config.tls, "sub-1"),
            config,
            "sub-1",
            "pull",
            leader,
        )
        await conn.send(FrameType.PULL, {"position": int(Position.ZERO)})
        stalled.set()
        while not done.is_set():
            await asyncio.sleep(0.05)
        conn.abort()

    client = threading.Thread(target=asyncio.run, args=(never_reads(),), daemon=True)
    client.start()
    assert stalled.wait(20)
    feed = Feed(stream, "pub-1", "trades")
    feed.payload_bytes = 1000
    feed.publish(1, 30_000)  # 30 MB: far more than the stalled socket's buffers take
    try:
        check_stream(stream, [feed], timeout_s=120)  # the other subscriber and nodes got it
        text = metrics(stream, leader)
        assert gauge(text, "rt_sequencer_loop_lag_seconds") < 1.0
        assert gauge(text, "rt_pull_server_connections") >= 1  # the stalled one, still open
    finally:
        done.set()
        client.join(10)
