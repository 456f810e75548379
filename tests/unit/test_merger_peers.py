"""The merger asks the raft leader first and a peer that just failed last: a paused or
cut-off node answers no FETCH, and each one from it waits out FETCH_TIMEOUT_S (asked
first, it held a follower restarted just before the leader was paused back 10 s)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rt_appliance.config import load_config
from rt_appliance.sequencer.merger import Merger
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.unit


def _order(tmp_path: Path, me: str, leader: str | None, failed: dict[str, float]) -> list[str]:
    config = load_config(write_local_config(tmp_path, nodes=5))
    merger = SimpleNamespace(
        config=config, node_name=me, leader=lambda: leader, _failed_until=failed
    )
    return Merger._peers(merger)  # type: ignore[arg-type]


def test_the_leader_first_then_the_others_in_order(tmp_path: Path) -> None:
    assert _order(tmp_path, "rt-2", None, {}) == ["rt-1", "rt-3", "rt-4", "rt-5"]
    assert _order(tmp_path, "rt-2", "rt-4", {}) == ["rt-4", "rt-1", "rt-3", "rt-5"]


def test_a_peer_that_just_failed_is_asked_last_for_a_while(tmp_path: Path) -> None:
    now = time.monotonic()
    later, past = now + 30, now - 1
    assert _order(tmp_path, "rt-2", "rt-3", {"rt-1": later}) == ["rt-3", "rt-4", "rt-5", "rt-1"]
    assert _order(tmp_path, "rt-2", "rt-3", {"rt-1": past}) == ["rt-3", "rt-1", "rt-4", "rt-5"]
    # the leader failing too: after the peers that did not
    assert _order(tmp_path, "rt-2", "rt-3", {"rt-3": later}) == ["rt-1", "rt-4", "rt-5", "rt-3"]
