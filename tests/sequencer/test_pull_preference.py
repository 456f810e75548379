"""Subscribers pull from the leader by default, from a follower when they prefer it: the
topology every node returns names the leader its sequencer sees."""

from __future__ import annotations

import re

import pytest

from rt_appliance.config import load_config
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def pulled_from(stream, host: str) -> list[str]:  # type: ignore[no-untyped-def]
    return re.findall(r"pulling from (rt-\d)", stream.subscriber_daemon(host).log())


def leaderless_answers(stream, host: str) -> int:  # type: ignore[no-untyped-def]
    return stream.subscriber_daemon(host).log().count("names no leader yet")


@pytest.mark.parametrize("prefer", ["follower", "leader"])
def test_subscriber_pulls_from_the_preferred_role(local_stream, prefer: str) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers={"pub-1": ["trades"]}, extra=SMALL)
    doc = stream.config_path.read_text().replace(
        "host: 127.0.2.1", f"host: 127.0.2.1\n  prefer: {prefer}"
    )
    stream.config_path.write_text(doc)
    assert load_config(stream.config_path).subscriber("sub-1").prefer == prefer
    stream.start()
    leader = stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades")]
    feeds[0].publish(1, 1000)
    wait_until(lambda: bool(pulled_from(stream, "sub-1")), 20, "the pull client to connect")
    # it chose before a leader may have been known: restart it, now that one is. An early
    # election may move the leader while it chooses, or the node it asked may not know the
    # leader yet (it then takes that node): then the choice is judged again.
    daemon = stream.subscriber_daemon("sub-1")
    for _ in range(3):
        before = stream.wait_leader()
        daemon.stop()
        seen = len(pulled_from(stream, "sub-1"))
        unjudged = leaderless_answers(stream, "sub-1")
        daemon.start()
        wait_until(
            lambda seen=seen: len(pulled_from(stream, "sub-1")) > seen,
            20,
            "the pull client to reconnect",
        )
        chosen = pulled_from(stream, "sub-1")[-1]
        leader = stream.wait_leader()
        if leader == before and leaderless_answers(stream, "sub-1") == unjudged:
            break
    assert (chosen == leader) == (prefer == "leader"), (chosen, leader)
    check_stream(stream, feeds)
