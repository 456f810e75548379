"""A follower's reporter pipelines its reports, asks for an answer only now and then,
and gives up on a leader that does not answer: at once when raft names another (an old
leader cut off by a partition never answers, and the new one cannot merge until it
hears from a majority), otherwise after REPORT_ANSWER_S. The leader answers only the
reports that ask (or, for a reporter of an earlier release, every one)."""

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
from rt_appliance.sequencer.control import _LEADER_MOVED, ControlServer, Reporter
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


async def _started(reporter: Reporter, peer: _Leader) -> asyncio.Future[object]:
    """A report session of ``reporter`` to ``peer`` (as leader rt-2), once its first
    report is out."""
    session = asyncio.ensure_future(reporter._session(peer, "rt-2", 10.0))  # type: ignore[arg-type]
    await _until(lambda: len(peer.reports) == 1)
    return session


async def _change(reporter: Reporter, peer: _Leader, extents: dict[str, int]) -> None:
    """One change of the extents, and the report it sends."""
    extents["trades.pub-1"] += 1
    reporter.changed.set()
    count = len(peer.reports)
    await _until(lambda: len(peer.reports) == count + 1)


def test_reports_leave_without_waiting_for_answers_up_to_the_window(tmp_path: Path) -> None:
    extents = {"trades.pub-1": 0}
    reporter = _reporter(tmp_path, ["rt-2"], extents)
    peer = _Leader()

    async def scenario() -> None:
        session = await _started(reporter, peer)
        for _ in range(REPORT_WINDOW - 1):  # changes while nothing is answered
            await _change(reporter, peer, extents)
        extents["trades.pub-1"] += 2
        reporter.changed.set()
        await asyncio.sleep(0.05)
        assert len(peer.reports) == REPORT_WINDOW  # the window is full: no more
        assert peer.reports[-1]["extents"]["trades.pub-1"] == REPORT_WINDOW - 1
        peer.answer(leader="rt-2", reports=REPORT_WINDOW)  # read them all: it opens
        await _until(lambda: len(peer.reports) == REPORT_WINDOW + 1)
        assert peer.reports[-1]["extents"]["trades.pub-1"] == REPORT_WINDOW + 1
        session.cancel()

    asyncio.run(scenario())


def test_a_deferred_change_is_reported_once_after_the_delay_with_later_changes(
    tmp_path: Path,
) -> None:
    """While the leader carries the input (``defer()`` > 0), a change waits that long, and
    the changes made meanwhile go out in the same report; with ``defer()`` 0 again, a
    change leaves at once."""
    config = load_config(write_local_config(tmp_path, nodes=3))
    extents = {"trades.pub-1": 0}
    delay = [0.2]
    reporter = Reporter(
        config,
        "rt-3",
        lambda: "rt-2",
        lambda: {"extents": dict(extents)},
        asyncio.Event(),
        defer=lambda: delay[0],
    )
    peer = _Leader()

    async def scenario() -> None:
        session = asyncio.ensure_future(reporter._session(peer, "rt-2", 10.0))  # type: ignore[arg-type]
        await _until(lambda: len(peer.reports) == 1)  # the first, at once (not a change)
        began = time.monotonic()
        for _ in range(3):
            extents["trades.pub-1"] += 1
            reporter.changed.set()
            await asyncio.sleep(0.02)
        assert len(peer.reports) == 1  # deferred
        await _until(lambda: len(peer.reports) == 2)
        assert time.monotonic() - began >= 0.2 * 0.9
        assert peer.reports[-1]["extents"]["trades.pub-1"] == 3  # all three, in one
        await asyncio.sleep(0.25)
        assert len(peer.reports) == 2
        delay[0] = 0.0
        began = time.monotonic()
        await _change(reporter, peer, extents)
        assert time.monotonic() - began < 0.2
        session.cancel()

    asyncio.run(scenario())


def test_a_report_asks_for_an_answer_only_now_and_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "REPORT_ASK_S", 0.1)
    extents = {"trades.pub-1": 0}
    reporter = _reporter(tmp_path, ["rt-2"], extents)
    peer = _Leader()

    async def scenario() -> None:
        session = await _started(reporter, peer)
        await _change(reporter, peer, extents)
        await _change(reporter, peer, extents)
        # the first asks; the next ones do not while its answer is awaited
        assert [r["ask"] for r in peer.reports] == [True, False, False]
        peer.answer(leader="rt-2", reports=1)
        await _until(lambda: not session.done() and peer.answers.empty())
        await _change(reporter, peer, extents)
        assert peer.reports[-1]["ask"] is False  # answered, but asked too recently
        await asyncio.sleep(0.1)
        await _change(reporter, peer, extents)
        assert peer.reports[-1]["ask"] is True
        session.cancel()

    asyncio.run(scenario())


def test_half_the_window_unanswered_asks_however_recent_the_last_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "REPORT_ASK_S", 60.0)
    extents = {"trades.pub-1": 0}
    reporter = _reporter(tmp_path, ["rt-2"], extents)
    peer = _Leader()

    async def scenario() -> None:
        session = await _started(reporter, peer)
        peer.answer(leader="rt-2", reports=1)
        await _until(lambda: peer.answers.empty())
        asks = []
        for _ in range(REPORT_WINDOW // 2):
            await _change(reporter, peer, extents)
            asks.append(peer.reports[-1]["ask"])
        assert asks == [False] * (REPORT_WINDOW // 2 - 1) + [True]
        session.cancel()

    asyncio.run(scenario())


def test_a_leader_of_an_earlier_release_answering_every_report_is_understood(
    tmp_path: Path,
) -> None:
    extents = {"trades.pub-1": 0}
    reporter = _reporter(tmp_path, ["rt-2"], extents)
    peer = _Leader()

    async def scenario() -> None:
        session = await _started(reporter, peer)
        for _ in range(REPORT_WINDOW - 1):
            await _change(reporter, peer, extents)
        await asyncio.sleep(0.02)
        assert len(peer.reports) == REPORT_WINDOW
        for _ in range(REPORT_WINDOW):  # one answer per report, with no count
            peer.answer(leader="rt-2")
        extents["trades.pub-1"] = 100
        reporter.changed.set()
        await _until(lambda: len(peer.reports) == REPORT_WINDOW + 1)
        assert not session.done()
        session.cancel()

    asyncio.run(scenario())


def test_an_answer_to_more_reports_than_were_sent_ends_the_session(tmp_path: Path) -> None:
    reporter = _reporter(tmp_path, ["rt-2"], {})
    peer = _Leader()

    async def scenario() -> None:
        session = await _started(reporter, peer)
        peer.answer(leader="rt-2", reports=5)
        with pytest.raises(control.FrameError, match="an answer to report 5, of 1 sent"):
            await asyncio.wait_for(session, 1.0)

    asyncio.run(scenario())


class _Follower:
    """The follower's end of a control connection, as the leader's server sees it."""

    peer = "rt-3"

    def __init__(self) -> None:
        self.answers: list[tuple[FrameType, dict[str, Any]]] = []

    async def send(self, frame_type: FrameType, fields: dict[str, Any]) -> None:
        self.answers.append((frame_type, fields))


def test_the_leader_answers_the_reports_that_ask_saying_how_many_it_read(
    tmp_path: Path,
) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))
    heard: list[dict[str, int]] = []
    server = ControlServer(
        config,
        "rt-1",
        lambda: "rt-1",
        lambda node, extents, *_: heard.append(extents),
        lambda: {},  # type: ignore[arg-type,return-value]
        lambda: None,
    )
    follower = _Follower()

    async def scenario() -> None:
        report = {"extents": {"trades.pub-1": 7}}
        await server._report(follower, {**report, "ask": False}, 1)  # type: ignore[arg-type]
        assert follower.answers == []
        await server._report(follower, {**report, "ask": True}, 2)  # type: ignore[arg-type]
        assert follower.answers == [(FrameType.STATE, {"leader": "rt-1", "reports": 2})]
        await server._report(follower, report, 3)  # type: ignore[arg-type]  # an earlier release
        assert follower.answers[-1] == (FrameType.STATE, {"leader": "rt-1", "reports": 3})

    asyncio.run(scenario())
    assert heard == [{"trades.pub-1": 7}] * 3


def test_a_session_ends_at_once_when_another_leader_is_named(tmp_path: Path) -> None:
    leader = ["rt-2"]
    reporter = _reporter(tmp_path, leader, {})
    peer = _Leader()

    async def scenario() -> object:
        session = await _started(reporter, peer)
        await asyncio.sleep(0.1)
        assert not session.done()  # unanswered, within the deadline
        leader[0] = "rt-1"
        return await asyncio.wait_for(session, 1.0)

    assert asyncio.run(scenario()) is _LEADER_MOVED


def test_not_leader_ends_the_session_with_the_leader_it_names(tmp_path: Path) -> None:
    reporter = _reporter(tmp_path, ["rt-2"], {})
    peer = _Leader()

    async def scenario() -> object:
        session = await _started(reporter, peer)
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
