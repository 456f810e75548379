"""A leader whose own copy of an input lacks what a majority holds plans from a peer's
copy at once, then hands over.

The leader plans merges from its own copy of the inputs. Here the publishers cannot
reach the leader's push port (their configuration names an address where nothing
listens for it), so only the followers receive the input. After ``fetch_after_ms`` the
leader plans from a follower's copy (merging goes on while it still leads); it is unfit
to lead after ``LEADER_INPUT_BEHIND_S``, hands its leadership to a follower, merging
goes on, and the old leader builds the merged records from its peers' input bytes, so
every node ends with the same merged log.
"""

from __future__ import annotations

import datetime
import re
import urllib.request

import pytest

from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream
from tests.sequencer.test_cluster import TWO, committed_seq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOWHERE = "127.0.0.99"  # a loopback address nothing listens on


def test_a_leader_without_its_own_copy_of_the_input_hands_over(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL)
    stream.start(push_clients=False)
    old = stream.wait_leader()
    nodes = [
        {"name": n.name, "host": NOWHERE if n.name == old else n.host} for n in stream.config.nodes
    ]
    for pub in stream.config.publishers:  # the publishers reach every node but the leader
        stream.set_view(pub.name, nodes)
        stream.publisher_daemon(pub.name).start()
    feeds = [Feed(stream, "pub-1", "trades").start(300), Feed(stream, "pub-2", "quotes").start(300)]

    new = stream.wait_leader(30.0, not_in=[old])
    before = committed_seq(stream, new)
    wait_until(lambda: committed_seq(stream, new) > before + 5, 30, "merging to go on")
    log_text = (stream.log_dir / f"sequencer-{old}.log").read_text()
    assert "stepping down as leader" in log_text, stream.logs()
    assert "its own copy of an input is behind a majority's" in log_text
    node = stream.config.node(old)
    url = f"http://{node.host}:{stream.config.ports.sequencer_metrics}/metrics"
    metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    assert 'rt_sequencer_stepped_down_total{cause="input_behind"} 1.0' in metrics, metrics
    # merging went on before the hand-over: planned from the followers' copies
    planning = re.search(r"planner: planning \S+ from rt-\d's copy", log_text)
    assert planning is not None, log_text
    assert planning.start() < log_text.index("stepping down as leader"), log_text
    planned = re.search(r"^rt_sequencer_planned_from_peers_total (\S+)$", metrics, re.M)
    assert planned is not None and float(planned.group(1)) > 0, metrics
    follower_log = (stream.log_dir / f"sequencer-{new}.log").read_text()
    began = _logged_at(follower_log, follower_log.index(" offers "))  # input reaches it
    print(
        f"after {new} was first offered input: {old} planned from a peer's copy at "
        f"{_logged_at(log_text, planning.start()) - began:.2f} s, handed over at "
        f"{_logged_at(log_text, log_text.index('stepping down as leader')) - began:.2f} s"
    )

    for f in feeds:
        f.stop()
    check_stream(stream, feeds)  # the old leader too: built from its peers' input


def _logged_at(log_text: str, index: int) -> float:
    """The wall-clock time of the log line holding ``log_text[index]``."""
    line = log_text[log_text.rindex("\n", 0, index) + 1 :]
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()
