"""Merged records sent as they are applied, on a real 3-node stream: a pulling Subscriber
gets most records from its node's memory (``rt_pull_server_from_memory_records``); the
first record of a new merged file, which goes from the file (its header with it), comes
as promptly as the rest even when nothing follows it (the merger wakes the pull
connections for it); and the copy ends byte-identical to every node's merged log."""

from __future__ import annotations

import itertools
import re
import time
import urllib.request
from collections.abc import Iterable

import pytest

from rt_appliance import Message, Publisher, Subscriber
from rt_appliance.clock import wall_ns
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import Feed, Follower, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MERGED_ROLL = 1 << 20  # the smallest merged file the configuration allows
PAYLOAD = 3000
RATE = 300  # msg/s: about 0.9 MB/s, a new merged file about every second
# then one message at a time, each alone in its merge, carried in its raft entry
# (under the 64 KiB carried at once): a new merged file every 18 of them
LONE_PAYLOAD = 58_000
SPACING_S = 0.5
PROMPT_S = 0.3  # a missed wake waits for the next message or the pull server's poll


class Reader(Follower):
    """Follows a Subscriber from a thread: each message's id, merged roll and latency."""

    def __init__(self, sub: Subscriber) -> None:
        self.seen: list[tuple[int, int, float]] = []
        super().__init__(sub, self._take)

    def _take(self, batch: Iterable[Message]) -> None:
        now = wall_ns()
        self.seen.extend((m.id, m.position.roll, (now - m.timestamp_ns) / 1e9) for m in batch)


def from_memory(stream, node: str) -> float:  # type: ignore[no-untyped-def]
    host, port = stream.config.node(node).host, stream.config.ports.sequencer_metrics
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.search(r"^rt_pull_server_from_memory_records_total (\S+)$", text, re.M)
    assert found, "rt_pull_server_from_memory_records_total missing"
    return float(found.group(1))


def test_records_sent_as_applied_and_new_files_promptly(local_stream) -> None:  # type: ignore[no-untyped-def]
    sequencer = {"merged_roll_bytes": MERGED_ROLL, "max_range_bytes": MERGED_ROLL // 4}
    stream = local_stream(nodes=3, extra={"sequencer": sequencer})
    stream.start(pull_clients=False)
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.payload_bytes = PAYLOAD
    with Subscriber(pull=stream.config_path, host="sub-1") as sub:
        reader = Reader(sub)
        feed.start(RATE)  # a stream keeping up: its records from memory
        wait_until(lambda: len(reader.seen) >= 3 * RATE or reader.error is not None, 60, "3 s")
        feed.stop()
        wait_until(lambda: len(reader.seen) >= len(feed.ids), 60, "every message delivered")
        assert reader.error is None, f"{reader.error!r}\n{stream.logs()}"
        source = sub._puller.client._pulling_from  # type: ignore[union-attr]
        sent = from_memory(stream, source)
        assert sent > len(feed.ids) / 2, f"{sent} of {len(feed.ids)} records from memory"

        # lone messages: the first record of each new file has nothing after it for 0.5 s
        feed.payload_bytes = LONE_PAYLOAD
        rolls = len({roll for _, roll, _ in reader.seen})
        deadline = time.monotonic() + 90
        with Publisher(feed.directory, feed.topic, feed.host, roll_bytes=feed.roll_bytes) as pub:
            while len({roll for _, roll, _ in reader.seen}) < rolls + 2:
                assert time.monotonic() < deadline, "two more merged files within 90 s"
                assert reader.error is None, f"{reader.error!r}\n{stream.logs()}"
                n = len(feed.ids) + 1
                pub.publish(feed.payload(n), id=n)
                pub.flush()
                feed.ids.append(n)
                time.sleep(SPACING_S)
        wait_until(lambda: len(reader.seen) >= len(feed.ids), 60, "every lone message")

    assert [i for i, _, _ in reader.seen] == feed.ids  # each once, in order
    firsts = [
        (roll, latency)
        for (_, before, _), (_, roll, latency) in itertools.pairwise(reader.seen)
        if roll != before
    ]
    assert len(firsts) >= 2, firsts
    lone = firsts[-2:]  # the files the lone messages began
    assert all(latency < PROMPT_S for _, latency in lone), lone
    check_stream(stream, [feed])  # the copy is byte-identical to every node's merged log
