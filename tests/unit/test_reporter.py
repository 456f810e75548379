"""A follower's reporter gives up on a leader that does not answer as soon as raft names
another: an old leader cut off by a partition never answers, and the new one cannot
merge until it hears from a majority."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.errors import TransportError
from rt_appliance.sequencer import control
from rt_appliance.sequencer.control import Reporter
from rt_lab.testing.cluster import write_local_config


class _Silent:
    """A connection whose peer never answers (bytes held by a partition)."""

    async def receive(self) -> tuple[int, bytes]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def _reporter(tmp_path: Path, leader: list[str]) -> Reporter:
    config = load_config(write_local_config(tmp_path, nodes=3))
    return Reporter(config, "rt-3", lambda: leader[0], dict, asyncio.Event())


def test_a_report_stops_waiting_when_another_leader_is_named(tmp_path: Path) -> None:
    leader = ["rt-2"]
    reporter = _reporter(tmp_path, leader)

    async def scenario() -> float:
        waiting = asyncio.ensure_future(reporter._answer(_Silent(), "rt-2"))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not waiting.done()
        leader[0] = "rt-1"
        started = time.monotonic()
        with pytest.raises(TransportError, match="the leader is now rt-1"):
            await asyncio.wait_for(waiting, 2.0)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 2.0


def test_a_leader_that_never_answers_is_given_up_after_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "REPORT_ANSWER_S", 0.2)
    reporter = _reporter(tmp_path, ["rt-2"])

    async def scenario() -> None:
        with pytest.raises(TransportError, match="no answer from rt-2 within"):
            await asyncio.wait_for(reporter._answer(_Silent(), "rt-2"), 2.0)  # type: ignore[arg-type]

    asyncio.run(scenario())
