"""A node that starts with no raft state grants no vote until it knows the stream is new
(a majority of nodes with empty logs) or has caught up with a leader of a stream with a
history; then it votes as raft does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _RAFT_STATE

from rt_appliance.sequencer.raft.joining import JOINING, UNDECIDED, VOTING, Joining, no_raft_state

pytestmark = pytest.mark.unit

PEER, OTHER, LEADER = TCPNode("127.0.0.2:1"), TCPNode("127.0.0.3:1"), TCPNode("127.0.0.4:1")


class FakeRaft:
    """The pysyncobj attributes Joining reads and the one method it calls."""

    def __init__(self) -> None:
        self.raftCurrentTerm = 0
        self._SyncObj__raftLeader: Any = None
        self._SyncObj__raftState = _RAFT_STATE.FOLLOWER
        self._SyncObj__votedForNodeId: str | None = None
        self._SyncObj__raftCommitIndex = 1
        self.saved: list[tuple[int, str | None]] = []

    def _SyncObj__setCurrentTerm(self, term: int, voted_for: str | None) -> None:
        self.raftCurrentTerm, self._SyncObj__votedForNodeId = term, voted_for
        self.saved.append((term, voted_for))


def _ask(index: int, term: int) -> dict[str, Any]:
    return {"type": "pre_vote", "term": term + 1, "last_log_index": index, "last_log_term": term}


def _append(term: int, commit: int) -> dict[str, Any]:
    return {"type": "append_entries", "term": term, "commit_index": commit, "prevLogIdx": 1}


VOTE = {"type": "request_vote", "term": 3, "last_log_index": 9, "last_log_term": 2}


def test_a_new_stream_votes_once_a_majority_is_seen_empty(tmp_path: Path) -> None:
    joining = Joining(FakeRaft(), tmp_path, nodes=3, empty=True)
    assert joining.state == UNDECIDED and not joining.may_vote and joining.may_stand
    assert joining.receive(PEER, VOTE) is True  # dropped: no vote granted
    assert joining.receive(PEER, _ask(1, 0)) is False  # the pre-vote module answers it
    assert joining.state == VOTING and joining.may_vote  # 2 of 3 empty: a new stream
    assert joining.receive(PEER, VOTE) is False  # now pysyncobj sees votes
    assert not (tmp_path / "raft.joining").exists()


def test_five_nodes_need_three_empty_and_history_never_counts(tmp_path: Path) -> None:
    joining = Joining(FakeRaft(), tmp_path, nodes=5, empty=True)
    joining.receive(PEER, _ask(1, 0))
    joining.receive(PEER, _ask(1, 0))  # the same peer twice counts once
    joining.receive(OTHER, _ask(57, 4))  # a node with a log
    assert joining.state == UNDECIDED
    joining.receive(OTHER, _ask(1, 0))
    assert joining.state == VOTING


def test_a_stream_with_a_history_is_joined_until_caught_up(tmp_path: Path) -> None:
    raft = FakeRaft()
    joining = Joining(raft, tmp_path, nodes=3, empty=True)
    assert joining.receive(LEADER, _append(term=5, commit=40)) is False
    assert joining.state == JOINING and not joining.may_vote and not joining.may_stand
    assert joining.describe() == (
        "joining a stream with a history: votes once its log holds commit 40"
    )  # what `rt status` shows
    assert (tmp_path / "raft.joining").read_text() == '{"until_commit": 40}'
    assert joining.receive(PEER, VOTE) is True
    # pysyncobj took the leader's term: its vote in that term is recorded as the leader's
    raft.raftCurrentTerm, raft._SyncObj__raftLeader = 5, LEADER
    joining.after_tick()
    assert raft.saved == [(5, LEADER.id)]
    raft._SyncObj__raftCommitIndex = 39
    joining.after_tick()
    assert joining.state == JOINING and raft.saved == [(5, LEADER.id)]  # not twice
    raft._SyncObj__raftCommitIndex = 40
    joining.after_tick()
    assert joining.state == VOTING and joining.may_vote and joining.describe() is None
    assert not (tmp_path / "raft.joining").exists()


def test_a_restart_while_joining_goes_on_joining(tmp_path: Path) -> None:
    Joining(FakeRaft(), tmp_path, nodes=3, empty=True).receive(LEADER, _append(7, 120))
    raft = FakeRaft()
    again = Joining(raft, tmp_path, nodes=3, empty=False)  # it has a journal by now
    assert again.state == JOINING and again.until_commit == 120
    raft._SyncObj__raftCommitIndex = 130
    again.after_tick()
    assert again.state == JOINING  # no leader heard since the restart
    raft._SyncObj__raftLeader = LEADER
    again.after_tick()
    assert again.state == VOTING


def test_a_node_with_state_or_alone_votes_at_once(tmp_path: Path) -> None:
    assert Joining(FakeRaft(), tmp_path, nodes=3, empty=False).may_vote
    assert Joining(FakeRaft(), tmp_path, nodes=1, empty=True).may_vote


def test_no_raft_state(tmp_path: Path) -> None:
    assert no_raft_state(tmp_path)
    (tmp_path / "raft.journal").write_bytes(b"")
    assert no_raft_state(tmp_path)
    (tmp_path / "raft.journal").write_bytes(b"x")
    assert not no_raft_state(tmp_path)
    (tmp_path / "raft.journal").unlink()
    (tmp_path / "raft.vote").write_text('{"term": 0, "voted_for": null}')
    assert not no_raft_state(tmp_path)


def test_an_undecided_node_elected_leader_votes_from_then_on(tmp_path: Path) -> None:
    """It may stand while undecided; once a majority elected it, its log is the stream's,
    and a later leader's append must not take it for a node joining a history."""
    raft = FakeRaft()
    joining = Joining(raft, tmp_path, nodes=3, empty=True)
    joining.after_tick()
    assert joining.state == UNDECIDED  # a follower still
    raft.raftCurrentTerm, raft._SyncObj__raftState = 1, _RAFT_STATE.LEADER
    joining.after_tick()
    assert joining.state == VOTING and joining.may_vote
    assert joining.receive(LEADER, _append(term=2, commit=183)) is False
    assert joining.state == VOTING and not (tmp_path / "raft.joining").exists()
