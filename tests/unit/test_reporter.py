"""A follower's reporter pipelines its reports, and gives up on a leader that does not
answer: at once when raft names another (an old leader cut off by a partition never
answers, and the new one cannot merge until it hears from a majority), otherwise after
REPORT_ANSWER_S."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from rt_appliance.config import load_config
from rt_appliance.errors import TransportError
from rt_appliance.limits import REPORT_WINDOW
from rt_appliance.sequencer import control
from rt_appliance.sequencer.control import _LEADER_MOVED, Reporter
from rt_appliance.transport.messages import FrameType, encode_control
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.unit


class _Leader:
    """The leader's end of a control connection: records reports, answers only when told
    (bytes held by a partition, or a leader busy elsewhere)."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.answers: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

    async def send(self, frame_type: FrameType, fields: dict[str, Any]) -> None:
        assert frame_type == FrameType.REPORT
        self.reports.append(fields)

    async def receive(self) -> tuple[int, bytes]:
        return await self.answers.get()

    def answer(self, frame_type: FrameType = FrameType.STATE, **fields: Any) -> None:
        self.answers.put_nowait((frame_type, encode_control(fields)))


def _reporter(tmp_path: Path, leader: list[str], extents: dict[str, int]) -> Reporter:
    config = load_config(write_local_config(tmp_path, nodes=3))
    return Reporter(
        config, "rt-3", lambda: leader[0], lambda: {"extents": dict(extents)}, asyncio.Event()
    )


async def _until(check: Any, deadline_s: float = 2.0) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_reports_leave_without_waiting_for_answers_up_to_the_window(tmp_path: Path) -> None:
    extents = {"trades.pub-1": 0}
    reporter = _reporter(tmp_path, ["rt-2"], extents)
    peer = _Leader()

    async def scenario() -> None:
        session = asyncio.ensure_future(reporter._session(peer, "rt-2", 10.0))  # type: ignore[arg-type]
        await _until(lambda: len(peer.reports) == 1)
        for n in range(1, REPORT_WINDOW + 3):  # changes while nothing is answered
            extents["trades.pub-1"] = n
            reporter.changed.set()
            await asyncio.sleep(0.01)
        assert len(peer.reports) == REPORT_WINDOW  # the window is full: no more
        assert peer.reports[-1]["extents"]["trades.pub-1"] == REPORT_WINDOW - 1
        peer.answer()  # one answer opens it: the newest extents leave at once
        await _until(lambda: len(peer.reports) == REPORT_WINDOW + 1)
        assert peer.reports[-1]["extents"]["trades.pub-1"] == REPORT_WINDOW + 2
        session.cancel()

    asyncio.run(scenario())


def test_a_session_ends_at_once_when_another_leader_is_named(tmp_path: Path) -> None:
    leader = ["rt-2"]
    reporter = _reporter(tmp_path, leader, {})
    peer = _Leader()

    async def scenario() -> object:
        session = asyncio.ensure_future(reporter._session(peer, "rt-2", 10.0))  # type: ignore[arg-type]
        await _until(lambda: len(peer.reports) == 1)
        await asyncio.sleep(0.1)
        assert not session.done()  # unanswered, within the deadline
        leader[0] = "rt-1"
        return await asyncio.wait_for(session, 1.0)

    assert asyncio.run(scenario()) is _LEADER_MOVED


def test_not_leader_ends_the_session_with_the_leader_it_names(tmp_path: Path) -> None:
    reporter = _reporter(tmp_path, ["rt-2"], {})
    peer = _Leader()

    async def scenario() -> object:
        session = asyncio.ensure_future(reporter._session(peer, "rt-2", 10.0))  # type: ignore[arg-type]
        await _until(lambda: len(peer.reports) == 1)
        peer.answer(FrameType.NOT_LEADER, leader="rt-1")
        return await asyncio.wait_for(session, 1.0)

    assert asyncio.run(scenario()) == "rt-1"


def test_a_leader_that_never_answers_is_given_up_after_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "REPORT_ANSWER_S", 0.2)
    reporter = _reporter(tmp_path, ["rt-2"], {})

    async def scenario() -> None:
        session = reporter._session(_Leader(), "rt-2", 10.0)  # type: ignore[arg-type]
        with pytest.raises(TransportError, match="no answer from rt-2 within"):
            await asyncio.wait_for(session, 2.0)

    asyncio.run(scenario())
