"""One node's raft: pysyncobj driven by the sequencer's event loop.

* **One thread, no polling.** pysyncobj's own tick thread is off (``autoTick=False``):
  :meth:`RaftNode.run` ticks raft on the sequencer's event loop, at once when a message
  arrives, a proposal is made or a peer comes or goes, and otherwise when raft's next
  timer is due (the leader's next heartbeat, a follower's election deadline; at least
  every ``limits.RAFT_TICK_S`` on a leader, ``limits.RAFT_FOLLOWER_TICK_S`` on a
  follower, which every message from the leader ticks). The TLS links are asyncio
  streams on the same loop, so a message costs no hand-over between threads.
* **Replicated methods never raise.** :meth:`_Replicated.apply` hands the command bytes
  to the state machine and logs and counts anything it raises; a malformed command is
  rejected by the state machine identically on every node. A committed entry is applied
  only once a journal sync has covered it.
* **Snapshots are JSON**: the state machine's, plus the two raft entries pysyncobj keeps.
* **Every ``SyncObjConf`` option is set explicitly** in :func:`_conf`.
* **A node unfit to lead steps down** (:meth:`RaftNode.set_unfit`): a leader hands its
  leadership to its most caught-up follower (pysyncobj's ``transferLeadership``, raft's
  TimeoutNow: that follower stands at once, no election timeout is waited out) or, if
  none is caught up within ``STEP_DOWN_FORCE_S``, becomes a follower without a hand-over;
  while unfit, the node stands for no election (its election deadline is kept ahead).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.node import Node, TCPNode
from pysyncobj.syncobj import _RAFT_STATE

from rt_appliance import trace
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import RTError
from rt_appliance.limits import (
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    KEEPALIVE_PROBES,
    RAFT_APPEND_BATCH_BYTES,
    RAFT_APPLY_BATCH,
    RAFT_BIND_RETRY_S,
    RAFT_COMMANDS_QUEUE,
    RAFT_CONNECTION_RETRY_S,
    RAFT_CONNECTION_TIMEOUT_MIN_S,
    RAFT_DNS_CACHE_S,
    RAFT_DNS_FAIL_CACHE_S,
    RAFT_FOLLOWER_TICK_S,
    RAFT_SNAPSHOT_BATCH_BYTES,
    RAFT_SOCKET_BUFFER_BYTES,
    RAFT_TICK_FAILURE_LOG_EVERY_S,
    RAFT_TICK_S,
    RAFT_TIMER_SLACK_S,
    STEP_DOWN_FORCE_S,
    STEP_DOWN_RETRY_S,
)
from rt_appliance.sequencer.raft import patches
from rt_appliance.sequencer.raft.codec import UNDECODABLE
from rt_appliance.sequencer.raft.compaction import CompactionPolicy
from rt_appliance.sequencer.raft.joining import Joining, no_raft_state
from rt_appliance.sequencer.raft.link import Link, address, leader_fallback_s
from rt_appliance.sequencer.raft.prevote import PreVote
from rt_appliance.sequencer.raft.transport import TlsTransport

__all__ = ["RaftNode", "RaftStatus", "StateMachine"]

log = logging.getLogger(__name__)


class StateMachine(Protocol):
    """What raft drives: deterministic apply, and a JSON snapshot of the state."""

    def apply(self, command: bytes) -> bool: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, snapshot: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str  # leader | follower | candidate
    leader: str | None
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    log_entries: int
    connected: list[str]
    peers: dict[str, dict[str, int | None]]  # leader only: next and match index per follower


class _Replicated(SyncObj):  # type: ignore[misc]
    def __init__(self, machine: StateMachine, link: Link, **kwargs: Any) -> None:
        self._machine, self._link = machine, link
        self.apply_errors = 0
        self.before_apply: Callable[[], None] | None = None  # there is something to apply
        self.apply_limit: Callable[[], int | None] | None = None  # apply no further now
        super().__init__(**kwargs)

    def _SyncObj__applyLogEntries(self) -> bool:
        """pysyncobj's apply step, after :attr:`before_apply` when there is something to
        apply, and only as far as :attr:`apply_limit` allows this tick."""
        commit: int = getattr(self, "_SyncObj__raftCommitIndex")  # noqa: B009 (mypy: unknown)
        applied: int = self._SyncObj__raftLastApplied
        if commit <= applied:
            return bool(SyncObj._SyncObj__applyLogEntries(self))
        if self.before_apply is not None:
            self.before_apply()
        limit = self.apply_limit() if self.apply_limit is not None else None
        if limit is None or limit >= commit:
            return bool(SyncObj._SyncObj__applyLogEntries(self))
        setattr(self, "_SyncObj__raftCommitIndex", max(limit, applied))  # noqa: B010
        try:
            return bool(SyncObj._SyncObj__applyLogEntries(self))
        finally:
            setattr(self, "_SyncObj__raftCommitIndex", commit)  # noqa: B010

    @replicated  # type: ignore[untyped-decorator]
    def apply(self, command: bytes) -> bool:
        # An entry is acted on only once it is on disk here. Usually a sync has covered
        # it already (an append is answered only after one); if not, sync now.
        index = self._SyncObj__raftLastApplied + 1
        self._link.sync_journal_through(index)
        trace.event("apply", self._link.name, index)
        try:
            return bool(self._machine.apply(command))
        except Exception:  # never raise into pysyncobj: it would retry this entry forever
            self.apply_errors += 1
            log.exception("raft: applying a command failed; it is ignored on this node")
            return False


class RaftNode:
    """One node's raft: propose commands, read role and leader; apply runs the machine."""

    def __init__(
        self, config: StreamConfig, name: str, state_dir: Path, machine: StateMachine
    ) -> None:
        patches.install()
        state_dir.mkdir(parents=True, exist_ok=True)
        self.config, self.name, self.machine = config, name, machine
        journal = str(state_dir / "raft.journal")
        self._link = Link(config, name, journal)
        self._snapshot_path = str(state_dir / "raft.snapshot")
        me = TCPNode(address(config, config.node(name)))
        others = [TCPNode(address(config, n)) for n in config.nodes if n.name != name]
        link = self._link
        made: list[TlsTransport] = []

        def transport(sync_obj: Any, self_node: Node, other_nodes: Any) -> TlsTransport:
            made.append(TlsTransport(sync_obj, self_node, other_nodes, link=link))
            return made[0]

        self.snapshot_problem = ""  # set if the snapshot on disk cannot be read
        empty = no_raft_state(state_dir)  # before pysyncobj writes its first entry
        self._obj = _Replicated(
            machine,
            link,
            selfNode=me,
            otherNodes=others,
            conf=_conf(config, journal, self._snapshot_path, self._serialize, self._deserialize),
            transportClass=transport,
        )
        self._transport = made[0]
        self._obj.before_apply = self._news_before_apply
        self._obj.apply_limit = self._synced_so_far
        seq = config.sequencer
        self.prevote = PreVote(
            self._obj,
            window_s=(seq.raft_min_timeout_ms - seq.append_entries_period_ms) / 1000,
            timeout_s=(seq.raft_min_timeout_ms / 1000, seq.raft_max_timeout_ms / 1000),
        )
        self.joining = Joining(self._obj, state_dir, len(config.nodes), empty, link.name_of)
        self.prevote.may_vote = lambda: self.joining.may_vote
        self._transport.intercept = self._intercept
        self._transport.on_lost = self._peer_lost
        patches.check("SyncObj", self._obj)
        patches.check("Transport", self._transport)
        journal_file = self._link.journal()
        if journal_file is not None:
            patches.check("FileJournal", journal_file)
            patches.check("ResizableFile", journal_file._FileJournal__journalFile)
        UNDECODABLE[0] = (self._obj._methodToID[self._obj._getFuncName("apply")], (b"",))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._tick_pending = False
        self._in_tick = False
        # (last index, commit index as sent, term) last sent (leader)
        self._news_sent = (0, 0, -1)
        self._tick_failures = 0
        self._commit_seen = 0
        self._timer: asyncio.TimerHandle | None = None
        self._next_failure_log = 0.0
        self._unfit: str | None = None  # why this node should not lead now
        self._stepping_since: float | None = None  # when this leader began to step down
        self._next_transfer_at = 0.0  # the next hand-over request while stepping down
        self.stepped_down = 0  # leaderships given up for being unfit
        self._compaction = CompactionPolicy.for_node(
            seq.compaction_min_entries, seq.compaction_min_s, name, [n.name for n in config.nodes]
        )
        self._compacted_at = time.monotonic()
        self.compactions_asked = 0
        self._replay: tuple[float, int] | None = None  # (since, entries) while replaying
        self._settled_term = -1  # the term in which this node last settled as leader
        self.on_settled: Callable[[], None] | None = None  # called once leading is settled
        # called (on the loop) when the leader this node knows changes, or its role does
        self.on_leader_change: Callable[[], None] | None = None
        self._leader_known: tuple[str | None, bool] = (None, False)

    async def wait_listening(self) -> None:
        """Return once raft's port accepts connections."""
        await self._transport.listening.wait()

    async def run(self) -> None:
        """Run raft on this event loop until cancelled: listen, dial every peer, and tick
        whenever something happens (a message, a proposal, a peer up or down) and at least
        every ``RAFT_TICK_S`` (election and heartbeat timers). Nothing is sent or applied
        before it runs."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._link.kick = self._kick
        # pysyncobj's first timeout ran from its construction, long before raft ran; it
        # runs from now instead, and is short (pre-vote keeps a leader that is there)
        self._first_election_timer()
        self._transport.dial()
        try:
            self._tick()  # also arms the timer tick; pysyncobj loads its snapshot in it
            if self.snapshot_problem:
                raise RTError(
                    f"raft snapshot unreadable ({self.snapshot_problem}); this node stops "
                    "rather than run without the state the snapshot holds; to rebuild it "
                    "from the other nodes see docs/RECOVERY.md"
                )
            await self._transport.listen()
            await asyncio.Event().wait()  # ticks come from kicks and the timer until cancelled
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def _arm_timer(self) -> None:
        """Tick again when raft's next timer is due, unless something kicks it sooner."""
        loop = self._loop
        if loop is None:
            return
        obj = self._obj
        if obj._isLeader():
            due = obj._SyncObj__newAppendEntriesTime
        else:
            due = obj._SyncObj__raftElectionDeadline
        left = due - time.monotonic()
        # a deadline already past was served by the tick that just ran (an election
        # waits for a peer to be connected, and a connection kicks a tick)
        # (a follower is ticked by each of the leader's messages, which put its deadline
        # back: it needs no timer between them)
        most = RAFT_TICK_S if obj._isLeader() else RAFT_FOLLOWER_TICK_S
        delay = min(left + RAFT_TIMER_SLACK_S, most) if left > 0 else RAFT_TICK_S
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay, self._tick)

    def _kick(self) -> None:
        """A tick as soon as the loop is free (on the loop's thread)."""
        if not self._tick_pending and self._loop is not None:
            self._tick_pending = True
            self._loop.call_soon(self._kicked)

    def _kicked(self) -> None:
        if self._tick_pending:  # else a tick ran since the kick (raft's timer)
            self._tick()

    def send_proposals(self) -> None:
        """Send the entries of proposals just made at once (on the loop's thread): they
        leave for the followers now, not after whatever else the loop has queued
        meanwhile. The rest of a tick (commit, apply, timers) follows as usual; only
        pysyncobj's step that takes proposals into the log runs here."""
        if self._loop is not None and not self._in_tick:
            self._take_and_send()
        self._kick()

    def _take_and_send(self) -> None:
        """A leader takes the proposals waiting into its log and sends what is new."""
        if self._obj._isLeader():
            self._obj._checkCommandsToApply()
            self._send_news()

    def _intercept(self, node: Node, message: dict[str, Any]) -> bool:
        """Raft's messages before pysyncobj sees them: True for one handled here."""
        return self.joining.receive(node, message) or self.prevote.receive(node, message)

    def _tick(self) -> None:
        self._tick_pending = False
        self._in_tick = True
        try:
            held = self._unfit is not None or not self.joining.may_stand
            if held and not self._obj._isLeader():
                self._hold_candidacy()
            elif self._replay is None:
                self.prevote.before_tick(time.monotonic())  # may hold an election due now
            self._compact_if_due()
            self._tick_a_batch()
            self.joining.after_tick()
            self._step_down(time.monotonic())  # while stepping down: ask again, or leave
            if trace.enabled():
                commit = self._obj._SyncObj__raftCommitIndex
                if commit != self._commit_seen:
                    self._commit_seen = commit
                    trace.event("commit", self.name, commit)
        except Exception:  # pysyncobj's own loop survives a failed tick the same way
            self._tick_failures += 1
            if time.monotonic() >= self._next_failure_log:
                log.exception("raft: a tick failed (%d so far); ticking on", self._tick_failures)
                self._next_failure_log = time.monotonic() + RAFT_TICK_FAILURE_LOG_EVERY_S
        finally:
            self._in_tick = False
            self._arm_timer()

    def _tick_a_batch(self) -> None:
        """One pysyncobj tick that applies at most ``RAFT_APPLY_BATCH`` committed entries.

        pysyncobj applies everything committed in one tick: a restarting node would replay
        its whole journal before it listens, and its peers would lack its vote meanwhile.
        Here the commit index the tick sees is held to a batch past what is applied, and
        the rest follows in further ticks; a node replaying so stands for no election
        (it votes, and takes appends) until it has caught up."""
        obj = self._obj
        commit = obj._SyncObj__raftCommitIndex
        applied = obj._SyncObj__raftLastApplied
        loading = bool(obj._SyncObj__needLoadDumpFile)  # this tick loads the snapshot
        limit = applied if loading else applied + RAFT_APPLY_BATCH  # nothing before it
        held = commit > limit and (loading or commit - applied > RAFT_APPLY_BATCH)
        if held:
            if self._replay is None and not loading:
                self._replay = (time.monotonic(), commit - applied)
                log.info("raft: applying %d committed entries, a batch a tick", commit - applied)
            if not obj._isLeader() and len(self.config.nodes) > 1:
                self._hold_candidacy()
            obj._SyncObj__raftCommitIndex = limit
        try:
            obj.doTick(0.0)
            self._send_news()
            if self._settled_term != obj.raftCurrentTerm and self.leading_settled():
                self._settled_term = obj.raftCurrentTerm
                if self.on_settled is not None:
                    self.on_settled()  # the planner may start
            known = (self.leader(), bool(obj._isLeader()))
            if known != self._leader_known:
                self._leader_known = known
                if self.on_leader_change is not None:
                    self.on_leader_change()
        finally:
            if held:
                self._release_commit(limit, commit)
                self._kick()  # the next batch as soon as the loop is free
            elif self._replay is not None:
                since, entries = self._replay
                self._replay = None
                if not obj._isLeader() and obj._getLeader() is None:
                    self._first_election_timer()
                log.info(
                    "raft: applied %d entries in %.2f s; caught up",
                    entries,
                    time.monotonic() - since,
                )

    def _send_news(self) -> None:
        """A leader sends what a tick made new, new entries or a higher commit index, to
        every follower at once, in one message each.

        pysyncobj's own way (``appendEntriesUseBatch`` off) sends a message per follower
        for every proposal it takes and again for every commit it applies: a tick that
        takes two proposals and commits one sent three to each follower, each a pickle
        and a TLS record on this loop. One carries them all, sent as soon as the tick
        ends; with nothing new, the heartbeats go out on raft's own timer."""
        obj = self._obj
        if not obj._isLeader():
            self._news_sent = (0, 0, -1)
            return
        commit = obj._SyncObj__raftCommitIndex
        journal = self._link.journal()
        if journal is not None and journal.dirty:  # as the transport caps it (synced only)
            commit = min(commit, journal.synced_index)
        news = (obj._SyncObj__getCurrentLogIndex(), commit, self.term())
        if news != self._news_sent:
            self._news_sent = news
            obj._SyncObj__sendAppendEntries()

    def _synced_so_far(self) -> int | None:
        """How far a tick may apply: while a journal sync runs, what the syncs covered so
        far; the entries past it are applied in the tick its end kicks, not synced once
        more on this loop (:meth:`_Replicated.apply` would, holding raft's loop up for a
        sync the kernel is doing already). None: no limit."""
        journal = self._link.journal()
        if self._loop is None or journal is None or not journal.dirty:
            return None  # not run by a loop (tests tick by hand): apply syncs itself
        if not self._transport.sync_soon(journal):
            return None
        return journal.synced_index

    def _news_before_apply(self) -> None:
        """A leader whose commit index just moved tells its followers before it applies
        (with any proposal waiting, in the same message): they apply, and their
        subscribers read, alongside the leader rather than after its merge. Nothing is
        sent that its own journal's syncs do not cover (:meth:`_send_news`)."""
        self._take_and_send()

    def _release_commit(self, held_at: int, commit: int) -> None:
        """Give back the commit index a batch tick held at ``held_at``: ``commit``, or
        what the tick made of it (a leader's commit advanced; pysyncobj, loading the
        snapshot, cut it to the journal's end), never past the journal's end."""
        obj = self._obj
        after = obj._SyncObj__raftCommitIndex
        if after < held_at:  # cut by pysyncobj: that is the commit index now
            return
        journal = self._link.journal()
        last = journal.last_index() if journal is not None else commit
        obj._SyncObj__raftCommitIndex = max(after, min(commit, last))

    @property
    def replaying(self) -> bool:
        """Whether committed entries wait to be applied in batches (after a restart)."""
        return self._replay is not None

    def _compact_if_due(self) -> None:
        """Ask pysyncobj for a compaction (in this tick) when the policy says it is due."""
        journal = self._link.journal()
        if journal is None:
            return
        obj = self._obj
        now = time.monotonic()
        behind = False
        if obj._isLeader():  # would a follower then need the whole snapshot?
            drop_to = obj._SyncObj__raftLastApplied - 1
            behind = any(m < drop_to for m in obj._SyncObj__raftMatchIndex.values())
        if self._compaction.due(len(journal), now - self._compacted_at, behind):
            obj.forceLogCompaction()
            self._compacted_at = now
            self.compactions_asked += 1

    def set_unfit(self, reason: str | None) -> None:
        """Whether this node should lead (``None``) or not, and why (on the loop's thread).

        Unfit and leading: hand leadership over now (and again every
        ``STEP_DOWN_RETRY_S``, from raft's own ticks, until it is gone), or give it up
        without a hand-over once ``STEP_DOWN_FORCE_S`` passed with no follower caught up.
        Unfit: stand for no election. Fit: as raft would. A node with no peers leads
        whatever its state: nobody could lead in its place."""
        if len(self.config.nodes) == 1:
            reason = None
        if reason is not None and self._unfit is None:
            log.warning("raft: this node is unfit to lead: %s", reason)
        elif reason is None and self._unfit is not None:
            log.info("raft: this node is fit to lead again")
        self._unfit = reason
        obj = self._obj
        if reason is None or not obj._isLeader():
            self._stepping_since = None
            return
        now = time.monotonic()
        if self._stepping_since is None:
            self._stepping_since = now
            self.stepped_down += 1
            log.warning("raft: stepping down as leader (term %d): %s", self.term(), reason)
        self._step_down(now)
        self._kick()

    def _step_down(self, now: float) -> None:
        """Ask again for the hand-over (a follower may have caught up since), at most
        every ``STEP_DOWN_RETRY_S``; give leadership up once ``STEP_DOWN_FORCE_S`` passed.
        Called by :meth:`set_unfit` and by every tick while a leader steps down."""
        obj = self._obj
        since = self._stepping_since
        if since is None or not obj._isLeader():
            return
        if now - since < STEP_DOWN_FORCE_S:
            if now >= self._next_transfer_at:
                self._next_transfer_at = now + STEP_DOWN_RETRY_S
                obj.transferLeadership(None, _transfer_answer)
        else:
            log.warning("raft: no follower caught up to hand leadership to; leaving it")
            obj._SyncObj__raftState = _RAFT_STATE.FOLLOWER  # as pysyncobj's own fallback
            obj._SyncObj__raftLeader = None
            self._hold_candidacy()

    @property
    def unfit(self) -> str | None:
        """Why this node does not lead now, or None."""
        return self._unfit

    def _first_election_timer(self) -> None:
        """The election deadline of a node that has just started (or replayed its
        journal): a short one, staggered by the node's place in the stream, instead of
        a whole random timeout.

        After every node restarted (a power loss) nobody leads, and waiting out raft's
        timeout would only delay the first election. Pre-vote makes asking early safe:
        if a leader is there, the peers hear from it and say no, and this node waits for
        its heartbeat. The stagger (a quarter of ``raft_min_timeout_ms`` per place, plus
        a little jitter) lets one node ask first, so that the votes do not split."""
        self._obj._SyncObj__raftElectionDeadline = time.monotonic() + self._staggered_delay()

    def _staggered_delay(self) -> float:
        """A short wait before asking for an election: a quarter of ``raft_min_timeout_ms``
        per place of this node in the stream, plus a little jitter."""
        step = self.config.sequencer.raft_min_timeout_ms / 4000
        place = sorted(n.name for n in self.config.nodes).index(self.name)
        return step * place + random.uniform(0, step / 2)

    def _peer_lost(self, node: Node) -> None:
        """Our connection to ``node`` ended. If it was the leader, its process most likely
        died (the connection was reset): ask for an election after a short staggered
        wait, as after a start (:meth:`_first_election_timer`), not a whole election
        timeout after its last heartbeat, and say yes to a peer that asks. A leader that
        is alive after all (a connection dropped on the way) still reaches the other
        peers, which say no, and its next heartbeat puts the deadline back."""
        obj = self._obj
        if obj._isLeader() or obj._getLeader() != node:
            return
        self.prevote.leader_heard_at = float("-inf")
        soon = time.monotonic() + self._staggered_delay()
        if obj._SyncObj__raftElectionDeadline > soon:
            obj._SyncObj__raftElectionDeadline = soon
        log.info(
            "raft: connection to the leader %s lost: asking for an election in %.0f ms",
            self._link.name_of(node),
            max(0.0, obj._SyncObj__raftElectionDeadline - time.monotonic()) * 1000,
        )

    def _hold_candidacy(self) -> None:
        """Keep this follower's election deadline a whole timeout ahead: it stands for no
        election (it still votes, and follows whoever wins)."""
        ahead = time.monotonic() + self.config.sequencer.raft_max_timeout_ms / 1000
        obj = self._obj
        obj._SyncObj__raftElectionDeadline = max(obj._SyncObj__raftElectionDeadline, ahead)

    @property
    def apply_errors(self) -> int:
        return int(self._obj.apply_errors)

    @property
    def refusals(self) -> collections.Counter[str]:
        return self._link.refusals

    @property
    def failure(self) -> BaseException | None:
        """Why raft cannot go on here (a failed journal sync), or None."""
        return self._link.failure

    def set_refusal_hook(self, hook: Callable[[str], None]) -> None:
        self._link.on_refused = hook

    def propose(self, command: bytes, done: Callable[[bool, str], None]) -> None:
        """Submit ``command`` (from any thread); ``done(accepted, why)`` runs on raft's
        event loop once it is decided."""

        def callback(result: Any, error: int) -> None:
            if error == FAIL_REASON.SUCCESS:
                done(bool(result), "" if result else "rejected by the state machine")
            else:
                done(False, _FAIL_NAMES.get(error, f"error {error}"))

        self._obj.apply(command, callback=callback)
        loop = self._loop
        if loop is not None and threading.get_ident() == self._loop_thread:
            self._kick()  # no wake through the self-pipe from the loop's own thread
        elif loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing: no tick to come
                loop.call_soon_threadsafe(self._kick)

    def leader(self) -> str | None:
        """The leader this node knows of (cheap: no full status)."""
        node = self._obj._getLeader()
        return self._link.name_of(node) if node is not None else None

    def term(self) -> int:
        """The current raft term (cheap: no full status)."""
        return int(self._obj.raftCurrentTerm)

    def status(self) -> RaftStatus:
        s = self._obj.getStatus()
        leader = s.get("leader")
        return RaftStatus(
            role={0: "follower", 1: "candidate", 2: "leader"}.get(s["state"], "unknown"),
            leader=self._link.name_of(leader) if leader is not None else None,
            term=int(s["raft_term"]),
            commit_index=int(s["commit_idx"]),
            last_applied=int(s["last_applied"]),
            has_quorum=bool(s["has_quorum"]),
            log_entries=int(s["log_len"]),
            peers={
                n.name: {
                    "next_index": s.get(f"next_node_idx_server_{address(self.config, n)}"),
                    "match_index": s.get(f"match_idx_server_{address(self.config, n)}"),
                }
                for n in self.config.nodes
                if n.name != self.name
            },
            connected=sorted(
                n.name
                for n in self.config.nodes
                if n.name != self.name
                and s.get(f"partner_node_status_server_{address(self.config, n)}") == 2
            ),
        )

    def is_leader(self) -> bool:
        return bool(self._obj._isLeader())

    def peer_versions(self) -> dict[str, dict[str, Any]]:
        """What each peer that connected said it runs: its raft protocol and release
        (None: a release before versions)."""
        return {
            name: {"raft_protocol": protocol, "software": software}
            for name, (protocol, software) in sorted(self._transport.peer_versions.items())
        }

    def peers_without(self, feature: str) -> list[str]:
        """The peers that connected without saying they do ``feature`` (older releases)."""
        known = self._transport.peer_features
        return sorted(
            name for name in self._transport.peer_versions if feature not in known.get(name, ())
        )

    def peers_do(self, feature: str) -> bool:
        """Whether every other node of the stream has connected and said it does
        ``feature`` (a node not heard from yet may run an older release)."""
        known = self._transport.peer_features
        return all(
            feature in known.get(n.name, ()) for n in self.config.nodes if n.name != self.name
        )

    def leading_settled(self) -> bool:
        """Leading, with an entry of this term applied here. Raft commits the entries of
        earlier terms in the new leader's log only with the first entry of its own (the
        no-op pysyncobj appends when a node becomes leader); a plan made before they are
        applied builds on a state they are about to change, and is rejected."""
        obj = self._obj
        if not obj._isLeader():
            return False
        journal = self._link.journal()
        if journal is None or not len(journal):
            return True
        position = obj._SyncObj__raftLastApplied - int(journal[0][1])
        if not 0 <= position < len(journal):
            return False
        return int(journal[position][2]) == int(obj.raftCurrentTerm)

    def destroy(self) -> None:
        self._obj.destroy()

    # snapshots: JSON, the machine's state plus the two raft entries pysyncobj keeps
    def _serialize(self, path: str, raft_data: Any) -> None:
        last, before, _cluster = raft_data
        doc = {
            "format": 1,
            "state": self.machine.snapshot(),
            "entries": [_entry_json(last), _entry_json(before)],
        }
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())

    def _deserialize(self, path: str) -> tuple[Any, Any, Any]:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            # pysyncobj would log it and go on with an empty state behind a journal
            # that no longer starts at the beginning: this node would disagree with the
            # others for good. Stop instead (RaftNode raises it once pysyncobj returns).
            self.snapshot_problem = f"{path}: {exc}"
            raise
        self.machine.restore(doc["state"])
        last, before = (_entry_from_json(e) for e in doc["entries"])
        journal = self._link.journal()
        if journal is not None:
            journal.keep_from(before[1], before[2])
        return last, before, None


_FAIL_NAMES = {
    FAIL_REASON.QUEUE_FULL: "raft queue full",
    FAIL_REASON.MISSING_LEADER: "no leader",
    FAIL_REASON.DISCARDED: "discarded by a new leader",
    FAIL_REASON.NOT_LEADER: "not the leader",
    FAIL_REASON.LEADER_CHANGED: "leader changed",
    FAIL_REASON.REQUEST_DENIED: "request denied",
    # 0.3.17: a stale answer after a leader restart (older releases stop on it, which
    # patches.install refuses); read by name so an older release still imports this
    getattr(FAIL_REASON, "UNKNOWN_OUTCOME", 7): "outcome unknown (the leader restarted)",
}


def _transfer_answer(_result: Any, error: int) -> None:
    if error != FAIL_REASON.SUCCESS:  # no follower caught up yet: asked again next time
        log.debug("raft: leadership hand-over not made (%s)", _FAIL_NAMES.get(error, error))


def _entry_json(entry: Any) -> list[Any]:
    command, idx, term = entry
    if isinstance(command, str):
        command = command.encode()
    return [base64.b64encode(command).decode(), int(idx), int(term)]


def _entry_from_json(item: list[Any]) -> tuple[bytes, int, int]:
    return base64.b64decode(item[0]), int(item[1]), int(item[2])


_NEVER_ENTRIES, _NEVER_S = 1 << 62, 1 << 40  # pysyncobj's own compaction trigger: off


def _conf(
    config: StreamConfig,
    journal: str,
    snapshot: str,
    serialize: Callable[[str, Any], None],
    deserialize: Callable[[str], tuple[Any, Any, Any]],
) -> SyncObjConf:
    seq = config.sequencer
    min_timeout = seq.raft_min_timeout_ms / 1000
    max_timeout = seq.raft_max_timeout_ms / 1000
    return SyncObjConf(
        password=None,  # TLS protects the traffic instead of pysyncobj's own encryption
        autoTick=False,  # ticked by RaftNode.run on the sequencer's event loop
        autoTickPeriod=RAFT_TICK_S,
        commandsQueueSize=RAFT_COMMANDS_QUEUE,
        raftMinTimeout=min_timeout,
        raftMaxTimeout=max_timeout,
        appendEntriesPeriod=seq.append_entries_period_ms / 1000,
        connectionTimeout=max(max_timeout, RAFT_CONNECTION_TIMEOUT_MIN_S),
        connectionRetryTime=RAFT_CONNECTION_RETRY_S,
        leaderFallbackTimeout=leader_fallback_s(config),
        # pysyncobj's sends per entry and per commit are off: RaftNode sends what a tick
        # made new at its end, at once and in one message per follower (_send_news); and
        # pysyncobj makes no wake-up pipe: raft is ticked by RaftNode.run, propose kicks it
        appendEntriesUseBatch=True,
        appendEntriesBatchSizeBytes=RAFT_APPEND_BATCH_BYTES,
        bindAddress=None,  # the transport binds the node's own address
        preferredAddrType="ipv4",
        sendBufferSize=RAFT_SOCKET_BUFFER_BYTES,
        recvBufferSize=RAFT_SOCKET_BUFFER_BYTES,
        dnsCacheTime=RAFT_DNS_CACHE_S,
        dnsFailCacheTime=RAFT_DNS_FAIL_CACHE_S,
        # RaftNode asks for every compaction itself (raft/compaction.py): pysyncobj's own
        # trigger never fires, and no slot of time holds a compaction back
        logCompactionMinEntries=_NEVER_ENTRIES,
        logCompactionMinTime=_NEVER_S,
        logCompactionSplit=False,
        logCompactionBatchSize=RAFT_SNAPSHOT_BATCH_BYTES,
        commandsWaitLeader=True,
        fullDumpFile=snapshot,
        journalFile=journal,
        bindRetryTime=RAFT_BIND_RETRY_S,
        maxBindRetries=0,
        onReady=None,
        onStateChanged=None,
        dynamicMembershipChange=False,
        pollerType="auto",
        useFork=False,  # serialising in a fork of a threaded process is unsafe
        serializer=serialize,
        serializeChecker=None,
        deserializer=deserialize,
        onCodeVersionChanged=None,
        tcp_keepalive=(KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES),
    )
