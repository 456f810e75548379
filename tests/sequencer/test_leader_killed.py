"""A leader whose process dies is replaced without waiting out raft's election timeout.

The followers' connections to a killed leader are reset at once; they used to wait a
whole random election timeout from its last heartbeat before asking for an election,
and a pre-vote refused by a peer that had not yet noticed cost a second timeout (2.2 s
from the kill to a new leader in ``rt chaos``, seed 149131534, with timeouts of
0.4-1 s). Now a follower that loses its connection to the leader asks after a short
wait staggered by its place, and says yes to a peer that asks.

The timeouts here are long (6-12 s) so that only that path can elect a new leader in
under 6 s.
"""

from __future__ import annotations

import signal
import time

import pytest

from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream
from tests.sequencer.test_cluster import TWO, committed_seq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIN_TIMEOUT_S = 6.0
SLOW_ELECTIONS = {
    "sequencer": {
        **SMALL["sequencer"],
        "raft_min_timeout_ms": int(MIN_TIMEOUT_S * 1000),
        "raft_max_timeout_ms": int(MIN_TIMEOUT_S * 2000),
    }
}


def test_a_killed_leader_is_replaced_before_the_election_timeout(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers=TWO, extra=SLOW_ELECTIONS).start()
    old = stream.wait_leader(60.0)
    feeds = [
        Feed(stream, "pub-1", "trades").start(300),
        Feed(stream, "pub-2", "quotes").start(300),
    ]
    wait_until(lambda: committed_seq(stream, old) > 5, 30, "merging under load")

    killed_at = time.monotonic()
    stream.kill_node(old, signal.SIGKILL)
    new = stream.wait_leader(30.0, not_in=[old])
    took = time.monotonic() - killed_at

    # the timeout path cannot elect before MIN_TIMEOUT_S less a heartbeat period
    assert took < MIN_TIMEOUT_S - 1.0, f"a new leader {took:.1f} s after the kill"
    logs = "".join(
        (stream.log_dir / f"sequencer-{n}.log").read_text() for n in stream.node_names if n != old
    )
    assert f"connection to the leader {old} lost: asking for an election" in logs

    before = committed_seq(stream, new)
    wait_until(lambda: committed_seq(stream, new) > before + 5, 30, "merging to go on")
    stream.start_node(old)
    for f in feeds:
        f.stop()
    check_stream(stream, feeds, timeout_s=120)
