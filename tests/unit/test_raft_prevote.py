"""Raft's pre-vote rules (:mod:`rt_appliance.sequencer.raft.prevote`), on a stand-in for
the few pysyncobj fields it reads and writes. Real nodes cut off by a real partition are
in ``tests/sequencer/test_partition.py``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pysyncobj.syncobj import _RAFT_STATE

from rt_appliance.sequencer.raft.prevote import PreVote

FOLLOWER, LEADER = _RAFT_STATE.FOLLOWER, _RAFT_STATE.LEADER


class _Transport:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, node: str, message: dict[str, Any]) -> bool:
        self.sent.append((node, message))
        return True


class _Raft:
    """The pysyncobj fields pre-vote touches, by their mangled names."""

    def __init__(self, term: int = 5, last: tuple[int, int] = (5, 100), peers: int = 2) -> None:
        self.raftCurrentTerm = term
        self._SyncObj__raftState = FOLLOWER
        self._SyncObj__otherNodes = {f"n{i}" for i in range(peers)}
        self._SyncObj__connectedNodes = set(self._SyncObj__otherNodes)
        self._SyncObj__raftElectionDeadline = 0.0
        self._SyncObj__transferInProgress = False
        self._SyncObj__transport = _Transport()
        self.voted_for: str | None = "someone"
        self.last_term, self.last_index = last

    def _SyncObj__getCurrentLogTerm(self) -> int:
        return self.last_term

    def _SyncObj__getCurrentLogIndex(self) -> int:
        return self.last_index

    def _SyncObj__setCurrentTerm(self, term: int, voted_for: str | None) -> None:
        self.raftCurrentTerm, self.voted_for = term, voted_for


def _prevote(raft: _Raft) -> PreVote:
    return PreVote(raft, window_s=0.3, timeout_s=(0.4, 1.0))


def _ask(term: int = 6, last: tuple[int, int] = (5, 100)) -> dict[str, Any]:
    return {"type": "pre_vote", "term": term, "last_log_term": last[0],
            "last_log_index": last[1], "round": 1}  # fmt: skip


def _answer(raft: _Raft) -> bool:
    _node, message = raft._SyncObj__transport.sent[-1]
    assert message["type"] == "pre_vote_response" and message["round"] == 1
    assert message["term"] == raft.raftCurrentTerm
    return bool(message["granted"])


@pytest.mark.parametrize(
    ("last", "granted"),
    [((5, 100), True), ((5, 101), True), ((6, 1), True), ((5, 99), False), ((4, 500), False)],
)
def test_a_peer_says_yes_only_to_a_log_at_least_as_up_to_date(
    last: tuple[int, int], granted: bool
) -> None:
    raft = _Raft()
    prevote = _prevote(raft)
    assert prevote.receive("n0", _ask(last=last)) is True  # handled: pysyncobj never sees it
    assert _answer(raft) is granted
    assert raft.raftCurrentTerm == 5 and raft.voted_for == "someone"  # no term, no vote


def test_a_peer_that_heard_a_leader_lately_or_leads_says_no() -> None:
    raft = _Raft()
    prevote = _prevote(raft)
    heartbeat = {"type": "append_entries", "term": 5, "commit_index": 0}
    assert prevote.receive("n1", heartbeat) is False  # raft's own: passed on
    prevote.receive("n0", _ask())
    assert _answer(raft) is False
    prevote.leader_heard_at = time.monotonic() - 0.31  # the window has passed
    prevote.receive("n0", _ask())
    assert _answer(raft) is True
    raft._SyncObj__raftState = LEADER
    prevote.receive("n0", _ask())
    assert _answer(raft) is False
    assert prevote.refused == 2


def test_an_election_waits_for_a_majority_of_yes_and_takes_the_highest_term() -> None:
    raft = _Raft(term=5)
    prevote = _prevote(raft)
    now = time.monotonic()
    raft._SyncObj__raftElectionDeadline = now - 0.01  # pysyncobj would stand in this tick
    assert prevote.before_tick(now) is True
    asked = [m for _, m in raft._SyncObj__transport.sent]
    assert len(asked) == 2 and all(m["type"] == "pre_vote" and m["term"] == 6 for m in asked)
    assert raft._SyncObj__raftElectionDeadline >= now + 0.4  # held: no election yet
    assert raft.raftCurrentTerm == 5

    stale = {"type": "pre_vote_response", "round": 0, "granted": True, "term": 9}
    no = {"type": "pre_vote_response", "round": 1, "granted": False, "term": 5}
    yes = {"type": "pre_vote_response", "round": 1, "granted": True, "term": 9}
    assert prevote.receive("n0", stale) is True and prevote.receive("n1", no) is True
    assert raft._SyncObj__raftElectionDeadline >= now + 0.4  # neither counts
    prevote.receive("n0", yes)  # with its own: two of three
    assert raft._SyncObj__raftElectionDeadline == 0.0 and prevote.won == 1

    assert prevote.before_tick(time.monotonic()) is False  # pysyncobj stands now ...
    assert raft.raftCurrentTerm == 9 and raft.voted_for is None  # ... past the peer's term


def test_a_leader_heard_meanwhile_cancels_the_election() -> None:
    raft = _Raft()
    prevote = _prevote(raft)
    raft._SyncObj__raftElectionDeadline = time.monotonic() - 0.01
    prevote.before_tick(time.monotonic())
    prevote.receive("n0", {"type": "pre_vote_response", "round": 1, "granted": True, "term": 5})
    prevote.receive("n1", {"type": "append_entries", "term": 5, "commit_index": 0})
    raft._SyncObj__raftElectionDeadline = time.monotonic() - 0.01  # a later timeout
    assert prevote.before_tick(time.monotonic()) is True  # asks again, does not stand


def test_a_hand_over_and_a_node_with_nobody_to_ask_skip_the_question() -> None:
    raft = _Raft()
    prevote = _prevote(raft)
    raft._SyncObj__raftElectionDeadline = 0.0
    raft._SyncObj__transferInProgress = True  # the leader's TimeoutNow
    assert prevote.before_tick(time.monotonic()) is False
    raft._SyncObj__transferInProgress = False
    raft._SyncObj__connectedNodes = set()  # pysyncobj stands for nothing then
    assert prevote.before_tick(time.monotonic()) is False
    assert raft._SyncObj__transport.sent == []
