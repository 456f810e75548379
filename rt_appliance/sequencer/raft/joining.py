"""A node that starts with no raft state votes only once that is safe.

Raft is safe because a node never votes twice in one term and because any two
majorities share a node that holds every committed entry. A node that starts with no
raft state at all (no term and vote on disk, no journal, no snapshot) may be

* one node of a **new stream**: every node is empty, and voting is what forms it;
* a node **rebuilt** after its disk was lost (docs/OPERATIONS.md, "Replacing a dead
  node"): it may have voted in the current term before, and would vote again;
* a node **added** to a stream (growing from 3 to 5 nodes): the entries committed so far
  are on a majority of the *old* nodes only, and its vote for a node that lacks them
  could make a majority that has none of them.

So such a node starts *undecided*: it follows any leader and may stand, but grants no
vote (a ``request_vote`` is dropped, a pre-vote answered no) until it knows which case
it is in:

* **a new stream** once it has seen, with itself, a majority of the stream's nodes with
  empty logs (their pre-vote questions say so): from then on it votes as raft does;
* **a stream with a history** once a leader's append reaches it: it keeps not voting,
  and stands for no election, until its log holds every entry the leader had committed
  then (*joining*). Its vote in that leader's term is recorded as given to that leader,
  so it cannot be given again. ``raft.joining`` (next to the journal) keeps the target
  across a restart.

A node that has a log, or a term on disk, is not held back at all.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj.node import Node
from pysyncobj.syncobj import _RAFT_STATE

from rt_appliance.log.segments import fsync_dir

__all__ = ["Joining", "no_raft_state"]

log = logging.getLogger(__name__)

UNDECIDED, JOINING, VOTING = "undecided", "joining", "voting"
MARKER = "raft.joining"


def no_raft_state(directory: Path) -> bool:
    """Whether a node's raft directory holds nothing yet: no term or vote, no journal
    entries and no snapshot (before pysyncobj writes its first entry)."""
    for name in ("raft.vote", "raft.snapshot"):
        if (directory / name).exists():
            return False
    journal = directory / "raft.journal"
    return not journal.exists() or journal.stat().st_size == 0


class Joining:
    """Whether this node may vote yet: :meth:`receive` sees each raft message first (it
    returns True for one that must not reach pysyncobj), :meth:`after_tick` moves on."""

    def __init__(
        self,
        obj: Any,
        directory: Path,
        nodes: int,
        empty: bool,
        name_of: Callable[[Node], str | None] = lambda node: None,
    ) -> None:
        self._obj = obj
        self._name_of = name_of
        self._nodes = nodes
        self._marker = directory / MARKER
        self._empty_peers: set[Node] = set()
        self.until_commit = 0  # joining: the leader's commit index when first heard
        self.state = VOTING
        saved = _read_marker(self._marker)
        if saved is not None:
            self.state, self.until_commit = JOINING, saved
            log.info("raft: still joining the stream: not voting until commit %d", saved)
        elif empty and nodes > 1:
            self.state = UNDECIDED
            log.info(
                "raft: this node starts with no raft state: it votes once it knows the "
                "stream is new, or once it has caught up with a leader"
            )

    @property
    def may_vote(self) -> bool:
        return self.state == VOTING

    def describe(self) -> str | None:
        """Why this node grants no vote now, for ``rt status`` (None: it votes)."""
        if self.state == UNDECIDED:
            return (
                "it started with no raft state: votes once the stream is known new or a "
                "leader is heard"
            )
        if self.state == JOINING:
            return (
                "joining a stream with a history: votes once its log holds commit "
                f"{self.until_commit}"
            )
        return None

    @property
    def may_stand(self) -> bool:
        """A joining node is behind by definition: it stands for no election."""
        return self.state != JOINING

    def receive(self, node: Node, message: dict[str, Any]) -> bool:
        if self.state == VOTING:
            return False
        kind = message.get("type")
        if kind == "request_vote":
            return True  # no vote yet: as if the message were lost
        if kind == "pre_vote" and self.state == UNDECIDED:
            if message.get("last_log_term") == 0 and message.get("last_log_index", 2) <= 1:
                self._empty_peers.add(node)
                if len(self._empty_peers) + 1 > self._nodes / 2:
                    self.state = VOTING
                    log.info(
                        "raft: %d of %d nodes have empty logs: a new stream; voting",
                        len(self._empty_peers) + 1,
                        self._nodes,
                    )
            return False
        if kind == "append_entries" and self.state == UNDECIDED:
            term, commit = message.get("term"), message.get("commit_index")
            if isinstance(term, int) and term >= self._obj.raftCurrentTerm:
                self.until_commit = commit if isinstance(commit, int) else 0
                self.state = JOINING
                _write_marker(self._marker, self.until_commit)
                log.info(
                    "raft: joining a stream with a history (leader %s, term %d, commit "
                    "%d): not voting until this node's log holds what is committed",
                    self._name_of(node) or node.id,
                    term,
                    self.until_commit,
                )
        return False

    def after_tick(self) -> None:
        """Undecided and elected leader: vote from now on. Joining: record the vote of
        the leader's term as given to it (once pysyncobj took the term), and vote again
        once caught up."""
        obj = self._obj
        if self.state == UNDECIDED and obj._SyncObj__raftState == _RAFT_STATE.LEADER:
            self.state = VOTING  # it stood and a majority elected it: its log is the stream's
            log.info("raft: elected leader (term %d); voting", obj.raftCurrentTerm)
            return
        if self.state != JOINING:
            return
        leader = obj._SyncObj__raftLeader
        following = leader is not None and obj._SyncObj__raftState == _RAFT_STATE.FOLLOWER
        if following and obj._SyncObj__votedForNodeId is None:
            obj._SyncObj__setCurrentTerm(obj.raftCurrentTerm, leader.id)
        if obj._SyncObj__raftCommitIndex >= self.until_commit and leader is not None:
            self.state = VOTING
            self._marker.unlink(missing_ok=True)
            log.info("raft: caught up to commit %d; voting", self.until_commit)


def _read_marker(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["until_commit"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return 0  # unreadable: still joining, caught up at the first leader's append


def _write_marker(path: Path, until_commit: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"until_commit": until_commit}))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
