"""Raft's pre-vote: a node stands for election only if a majority would vote for it.

pysyncobj starts an election as soon as a follower's election timeout passes, raising
its term first. A node cut off from the others (a partition, a slow restart) so raises
its term again and again; once it is back, its higher term makes the healthy leader step
down, and the stream waits out an election it did not need.

With pre-vote (Ongaro's thesis, section 9.6), a node whose timeout passed first asks its
peers whether they *would* vote for it in the next term, without changing any term:

* a peer says yes if it has not heard from a leader for :attr:`PreVote.window_s` (a
  leader it hears from is alive) and the asker's log is at least as up to date as its
  own, which is raft's vote rule;
* the asker stands (pysyncobj's election, term + 1) only once a majority said yes, and
  tries again a whole random timeout later if not.

A leadership hand-over (raft's TimeoutNow, :meth:`RaftNode.set_unfit`) skips the
question: the leader asked that node to stand at once. Answers carry the peer's term; a
node about to stand takes the highest term among the yeses first, so that a peer with a
higher term but an older log (one that stood alone while cut off) can still vote for it.

The two messages (``pre_vote`` and ``pre_vote_response``) travel on raft's own TLS
connections and are answered here, on the loop that ticks raft; pysyncobj never sees
them. A node of a release without pre-vote ignores them (pysyncobj drops message types
it does not know) and so never says yes: during a rolling upgrade from such a release the
nodes that have it stand only with a majority of nodes that have it, and the others
stand as before.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.node import Node
from pysyncobj.syncobj import _RAFT_STATE

__all__ = ["PreVote"]

log = logging.getLogger(__name__)

ASK, ANSWER = "pre_vote", "pre_vote_response"


class PreVote:
    """The pre-vote of one node's raft: :meth:`before_tick` asks, :meth:`receive`
    answers and counts. Every call is made on the loop that ticks raft."""

    def __init__(self, obj: Any, window_s: float, timeout_s: tuple[float, float]) -> None:
        self._obj = obj
        self.window_s = window_s  # a peer heard from a leader this recently says no
        self._timeout_s = timeout_s  # raft's election timeout range: the next try
        self._round = 0
        self._asked_at = 0.0
        self._yes: set[Node] = set()
        self._no: set[Node] = set()
        self._unanswered = 0  # rounds in a row not won (logged now and then)
        self._won_round = 0
        self._highest_term = 0
        self._cleared_at: float | None = None  # when a majority said yes (stand now)
        self.leader_heard_at = float("-inf")  # last append from a leader of our term or later
        self.rounds = 0  # asked
        self.won = 0  # a majority said yes
        self.refused = 0  # answered no to a peer
        self.may_vote: Callable[[], bool] = lambda: True  # False: answer every question no

    # -- asking ------------------------------------------------------------------------

    def before_tick(self, now: float) -> bool:
        """Called before each raft tick. When pysyncobj would start an election in this
        tick, hold it (push the deadline a timeout ahead) and ask the peers, unless a
        majority already said yes or the leader handed leadership over. Returns whether
        a question was sent."""
        obj = self._obj
        if obj._SyncObj__raftState == _RAFT_STATE.LEADER or not obj._SyncObj__otherNodes:
            return False
        if obj._SyncObj__raftElectionDeadline >= now or not obj._SyncObj__connectedNodes:
            return False  # not due, or pysyncobj would not stand anyway (nobody to ask)
        if obj._SyncObj__transferInProgress:  # TimeoutNow: stand at once
            return False
        cleared, self._cleared_at = self._cleared_at, None
        if cleared is not None and now - cleared < self._timeout_s[1]:
            if self._highest_term > obj.raftCurrentTerm:
                obj._SyncObj__setCurrentTerm(self._highest_term, None)
            return False
        if self._round and self._won_round != self._round:
            self._log_unanswered()
        self._round += 1
        self.rounds += 1
        self._asked_at = now
        self._yes, self._no = set(), set()
        self._highest_term = 0
        obj._SyncObj__raftElectionDeadline = now + random.uniform(*self._timeout_s)
        question = {
            "type": ASK,
            "term": obj.raftCurrentTerm + 1,
            "last_log_index": obj._SyncObj__getCurrentLogIndex(),
            "last_log_term": obj._SyncObj__getCurrentLogTerm(),
            "round": self._round,
        }
        for node in obj._SyncObj__otherNodes:
            obj._SyncObj__transport.send(node, question)
        return True

    def _log_unanswered(self) -> None:
        """The round before this one was not won: say so at the 1st, 4th, 16th ... time
        in a row (a node cut off from a majority, or one whose log is behind)."""
        self._unanswered += 1
        if self._unanswered & (self._unanswered - 1) or self._unanswered & 0xAAAAAAAA:
            return
        obj = self._obj
        log.info(
            "raft: not standing for election (%d time(s) in a row): %d of %d peers "
            "would vote for this node (term %d, last entry %d of term %d), %d would not, "
            "the rest did not answer",
            self._unanswered,
            len(self._yes),
            len(obj._SyncObj__otherNodes),
            obj.raftCurrentTerm,
            obj._SyncObj__getCurrentLogIndex(),
            obj._SyncObj__getCurrentLogTerm(),
            len(self._no),
        )

    # -- answering and counting ----------------------------------------------------------

    def receive(self, node: Node, message: dict[str, Any]) -> bool:
        """Look at a message from ``node`` before raft does. Returns True for a pre-vote
        message, which is handled here and must not reach pysyncobj."""
        kind = message.get("type")
        obj = self._obj
        if kind == "append_entries":
            term = message.get("term")
            if isinstance(term, int) and term >= obj.raftCurrentTerm:
                self.leader_heard_at = time.monotonic()
                self._cleared_at = None  # a leader is there: no election to stand in
                self._unanswered = 0
            return False
        if kind == ASK:
            granted = self._would_vote(message)
            if not granted:
                self.refused += 1
            answer = {
                "type": ANSWER,
                "term": obj.raftCurrentTerm,
                "round": message.get("round"),
                "granted": granted,
            }
            obj._SyncObj__transport.send(node, answer)
            return True
        if kind == ANSWER:
            self._count(node, message)
            return True
        return False

    def _would_vote(self, message: dict[str, Any]) -> bool:
        obj = self._obj
        if obj._SyncObj__raftState == _RAFT_STATE.LEADER or not self.may_vote():
            return False
        if time.monotonic() - self.leader_heard_at < self.window_s:
            return False
        last_term, last_index = message.get("last_log_term"), message.get("last_log_index")
        if not isinstance(last_term, int) or not isinstance(last_index, int):
            return False
        ours = (obj._SyncObj__getCurrentLogTerm(), obj._SyncObj__getCurrentLogIndex())
        return (last_term, last_index) >= ours

    def _count(self, node: Node, message: dict[str, Any]) -> None:
        obj = self._obj
        if message.get("round") != self._round:
            return
        if not message.get("granted"):
            self._no.add(node)
            return
        if obj._SyncObj__raftState == _RAFT_STATE.LEADER or self._cleared_at is not None:
            return
        self._yes.add(node)
        term = message.get("term")
        if isinstance(term, int):
            self._highest_term = max(self._highest_term, term)
        if len(self._yes) + 1 > (len(obj._SyncObj__otherNodes) + 1) / 2:
            self._cleared_at = time.monotonic()
            self._unanswered, self._won_round = 0, self._round
            self.won += 1
            obj._SyncObj__raftElectionDeadline = 0.0  # stand in the next tick
            log.debug("raft: pre-vote won in %.1f ms", (time.monotonic() - self._asked_at) * 1000)
