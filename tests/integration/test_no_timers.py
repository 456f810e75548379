"""No hop of the data path waits on a timer: with every interval at its slowest, an idle
stream still carries a message from publish to the subscriber's copy at once.

Each setting below would add at least a second to a message if a hop waited for it:
a follower's periodic report, the leader's heartbeat (which would otherwise carry
the commit index to followers), the wait before fetching input from a peer.
The first message is written before the stream starts, so it reaches the nodes before
they have a leader: a follower must report it to the leader raft names later at once,
not a report interval later.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.subscribe import Subscriber
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream

pytestmark = pytest.mark.integration

SLOWEST = {
    "sequencer": {
        "report_interval_ms": 10_000,
        "append_entries_period_ms": 1_000,
        "raft_min_timeout_ms": 3_100,
        "raft_max_timeout_ms": 4_000,
        "fetch_after_ms": 60_000,
    },
}
# A timer on the path costs a second or more; a message on this shared machine takes a
# few milliseconds, and a busy moment tens.
LIMIT_S = 0.5
# The first election: at most two election timeouts (a split vote), then the message.
FIRST_LIMIT_S = 2 * SLOWEST["sequencer"]["raft_max_timeout_ms"] / 1000 + LIMIT_S


def _count(copy: Path) -> int:
    if not copy.is_dir():
        return 0
    return sum(len(b) for b in Subscriber(copy).read_batches())


def test_an_idle_stream_delivers_at_once_with_every_interval_at_its_slowest(
    tmp_path: Path,
) -> None:
    with LocalStream(tmp_path, 3, {"pub-1": ["trades"]}, ["sub-1"], extra=SLOWEST) as stream:
        copy = stream.subscriber_dir("sub-1")
        with Publisher(stream.publisher_root("pub-1"), "trades", "pub-1") as pub:
            pub.publish(b"before the stream starts")
            start = time.monotonic()
            stream.start()
            wait_until(lambda: _count(copy) == 1, 60, "the first message at the subscriber")
            first = time.monotonic() - start
            took = []
            for n in range(2, 8):
                start = time.monotonic()
                pub.publish(b"message %d" % n)
                wait_until(lambda n=n: _count(copy) == n, 10, f"message {n}", 0.002)
                took.append(time.monotonic() - start)
    assert first < FIRST_LIMIT_S, f"the first message took {first:.1f}s (a report interval: 10s)"
    assert max(took) < LIMIT_S, f"publish to the subscriber's copy took {took}"
    assert statistics.median(took) < LIMIT_S / 5, took
