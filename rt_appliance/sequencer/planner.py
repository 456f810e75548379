"""The leader's planner: which input range to merge next, proposed through raft.

Every node reports how far it durably holds each input. For an input, the
*majority extent* is the position that a majority of nodes (this one counted)
hold. The planner proposes ranges below the majority extent (past it only with the
bytes carried in the entry, below), at most
``max_range_bytes`` each (a record larger than that is a range of its own),
choosing among inputs the one whose next record has the oldest timestamp
(arrival order across publishers, kept plausible), and keeps up to
``max_inflight`` proposals in flight. It plans on a speculative copy of the
committed state advanced by its own proposals; when a proposal fails (a new
leader, a rejection) it waits for the in-flight ones and starts again from the
committed state. The state machine rejects any proposal that does not continue
the committed log exactly, so a stale plan can never corrupt it.

It plans from this node's own copy of the inputs. Once that copy of a file ends and a
majority holds later files, the plan moves on to the next file only once a majority's
copies of that file are known (followers report where theirs end) and none is longer:
a copy cut short (damage, a bad disk) looks just like a whole file that ended early,
and moving on from it would drop the records past the cut from the merged log. A
leader whose copy is short, or lacks a file, waits, and after a while hands over
(``behind``) to a node that holds it whole.

Until then it does not stand still: once its own copy of an input has lacked what a
majority holds, and not grown, for ``fetch_after_ms`` (its push server is down, or
publishers cannot reach it), it reads the records from a peer that holds them (FETCH from the peer's
``in/``, every record's CRC checked), in a step on a worker thread, never on the event
loop. A file's end is crossed on a peer's copy under the same rule as on its own: a
majority's copies of the file are known to end there. Its merger then builds those
records from the peers' bytes too, as a follower's does.

What no majority reported holding yet is planned too, from this node's own copy as its
push server wrote it (synced or not), with the bytes carried in the raft entry
(``Merge.data``): committing the entry makes them durable on a majority, so the merge
waits for neither the followers' input syncs nor their reports, and every node builds the
record from those bytes. At most ``CARRY_MAX_BYTES`` are carried in flight, and only
once every peer said it applies such merges (``CARRIED_INPUT``).

One word is enough to move on to an input's next file: this node's push server saw the
publisher's sender move on from the file where the plan stands (it does so only once it
has sent every whole record of the file), and no other node said its copy goes on past
that. So a publisher that reaches only the leader is merged across its sessions and
rolls too. The push server keeps what it saw in memory only; after a restart the
majority's reported ends decide, as above.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from functools import partial

from rt_appliance import trace
from rt_appliance.clock import wall_ns
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import RTError
from rt_appliance.limits import (
    CARRY_MAX_BYTES,
    LEADER_INPUT_BEHIND_S,
    LEADER_INPUT_LAGGING_S,
    MAX_FILE_HEADER_BYTES,
    PLAN_FETCH_PENALTY_S,
    PLAN_FETCH_TIMEOUT_S,
)
from rt_appliance.log.format import decode_file_header
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import Fetched, PeerFetcher, fetch_range
from rt_appliance.sequencer.inputs import Inputs, Records, first_record_bytes, whole_records
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merger import build_record
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.state import Merge, SequencerState, Skip
from rt_appliance.versions import CARRIED_INPUT

__all__ = ["Planner", "majority_extent"]

log = logging.getLogger(__name__)


class _Carried(Records):
    """Records whose bytes go in the raft entry (:meth:`Planner._carried_records`)."""

    __slots__ = ()


def majority_extent(extents: list[int], nodes: int) -> Position:
    """The position that at least a majority of ``nodes`` hold (missing reports: 0)."""
    padded = sorted([*extents, *([0] * (nodes - len(extents)))], reverse=True)
    return Position(padded[nodes // 2])


class Planner:
    """Leader-only: turns majority-held input into merge proposals."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        machine: SequencerMachine,
        inputs: Inputs,
        raft: RaftNode,
        wake: Callable[[], None],
        behind: Callable[[str], None] | None = None,
        fetcher: PeerFetcher | None = None,
    ) -> None:
        """``behind(why)``: this leader's own copy lacks what a majority holds (it should
        hand over); ``fetcher``: reads a peer's copy meanwhile (None: it waits)."""
        self.config, self.node_name = config, node_name
        self.machine, self.inputs, self.raft, self.wake = machine, inputs, raft, wake
        self._lock = threading.Lock()
        self.clock: Callable[[], float] = time.monotonic  # the bounds below are counted on it
        self._spec: SequencerState | None = None
        self._inflight = 0
        self._reports: dict[str, dict[str, int]] = {}
        # node -> where its copies of input files end (None: a node of an earlier release,
        # which does not say; taken as agreeing, as that release's leaders planned)
        self._ends: dict[str, dict[str, list[int]] | None] = {}
        self._short: dict[str, str] = {}  # input -> why this node's copy cannot go on
        self._report_times: dict[str, float] = {}
        self.proposed = 0
        self.failed = 0
        self.read_bytes = 0  # input bytes the last step's proposals covered
        self.cut_short = False  # the last step stopped at its budget, with more to plan
        self._term = -1  # the raft term the speculative state was planned in
        self._epoch = 0
        self.behind = behind  # told why, while this leader's own copy is behind
        self._behind_since: dict[str, float] = {}  # input -> since when
        self._behind_target: dict[str, Position] = {}  # input -> what a majority held then
        self._still_since: dict[str, float] = {}  # input -> since when its copy has not grown
        self._mine: dict[str, Position] = {}  # input -> this node's copy at the last look
        seq = config.sequencer
        self._behind_after_s = max(LEADER_INPUT_BEHIND_S, seq.fetch_after_ms / 1000)
        self.fetcher = fetcher
        self._fetch_after_s = seq.fetch_after_ms / 1000
        self.may_fetch = False  # set for a step on a worker thread: it may ask peers
        self.wants_fetch = False  # the last step left input a peer could give to such a step
        self.from_peers = 0  # ranges proposed from a peer's copy
        self.from_peers_in_step = False  # the last step planned some
        self._peer_told: set[str] = set()  # inputs whose peer reads were logged this term
        self._failed_until: dict[str, float] = {}  # peer -> not asked until then
        self._from_peer: dict[str, Records] = {}  # input -> records last read from a peer
        # leading, and every peer applies merges that carry their input: ranges no majority
        # reported holding yet are planned from this node's written copy, bytes in the entry
        self.carrying = False
        self._carried_inflight = 0  # bytes carried by proposals not decided yet
        self.carried = 0  # ranges proposed with their input carried

    def report(
        self, node: str, extents: dict[str, int], ends: dict[str, list[int]] | None = None
    ) -> None:
        """A node's extents, and where its copies of the files from the merged positions
        on end (None: it does not say)."""
        with self._lock:
            self._reports[node] = extents
            self._ends[node] = ends
            self._report_times[node] = self.clock()

    def reports(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return dict(self._reports)

    def step(self, budget_bytes: int | None = None, may_fetch: bool = False) -> int:
        """Propose what can be proposed now; returns how many proposals were made.

        With ``budget_bytes`` the step stops once its proposals cover that many input
        bytes, and :attr:`cut_short` says it did (what is left waits for the next step).
        :attr:`read_bytes` is how many input bytes the step's proposals covered. With
        ``may_fetch`` (a step on a worker thread) it may read a peer's copy of an input
        this node's own copy lacks; without, :attr:`wants_fetch` says a step with it
        would plan more.

        The lock is held only to read and update the bookkeeping, never while input is
        read and records are built: reports and raft's callbacks (on the event loop)
        take the same lock, and must not wait for a step.
        """
        self.read_bytes, self.cut_short, self.wants_fetch = 0, False, False
        self.may_fetch, self.from_peers_in_step = may_fetch, False
        if not self.raft.is_leader():
            self.carrying = False
            with self._lock:
                self._spec = None
            return 0
        if not self.raft.leading_settled():  # the log from earlier terms is still applying
            return 0  # (raft calls on_settled, which wakes the planner, once it is)
        self.carrying = self.inputs.tracks_writes and self.raft.peers_do(CARRIED_INPUT)
        local = self.inputs.extents()
        term = self.raft.term()
        with self._lock:
            self._reports[self.node_name] = local
            if term != self._term:  # a new leadership: nothing planned before it counts
                self._term, self._spec, self._inflight = term, None, 0
                self._epoch += 1
                self._behind_since.clear()  # nor how long an earlier one lacked input
                self._behind_target.clear()
                self._still_since.clear()
                self._short.clear()
                self._peer_told.clear()
                self._from_peer.clear()
                self._carried_inflight = 0
            if self._spec is None:
                if self._inflight:
                    return 0
                self._spec = self.machine.committed()
            spec, epoch, reports = self._spec, self._epoch, dict(self._reports)
            ends = dict(self._ends)
            room = self.config.sequencer.max_inflight - self._inflight
        self._judge_own_copy(local, reports, spec)
        made = 0
        while made < room:
            merge = self._next(spec, reports, ends)
            if merge is None:
                break
            trace.event("planned", merge.dir, merge.end)
            read = self._from_peer.get(merge.dir)
            if read is not None and int(read.start) == merge.start:
                self.from_peers += 1
                self.from_peers_in_step = True
            command = merge.encode()
            carried = len(merge.data) if isinstance(merge, Merge) and merge.data else 0
            with self._lock:
                if self._spec is not spec:  # a proposal failed meanwhile: replan next step
                    break
                if spec.apply_decoded(merge) is None:  # command decodes to merge
                    log.error("planner: own proposal rejected locally: %s", spec.last_reject)
                    self._spec = None
                    break
                self._inflight += 1
                self.proposed += 1
                if carried:
                    self._carried_inflight += carried
                    self.carried += 1
            made += 1
            self.machine.proposing(command, merge)
            self.raft.propose(command, partial(self._done, epoch, carried))
            trace.event("proposed", merge.dir, merge.end)
            self.read_bytes += merge.end - merge.start
            if budget_bytes is not None and self.read_bytes >= budget_bytes and made < room:
                self.cut_short = True
                break
        return made

    def _judge_own_copy(
        self, local: dict[str, int], reports: dict[str, dict[str, int]], spec: SequencerState
    ) -> None:
        """Tell :attr:`behind` while this leader lacks input bytes past what is merged
        that a majority of nodes hold, and its copy has not grown for longer than it
        takes a push to land (or has trailed theirs for ``LEADER_INPUT_LAGGING_S``)."""
        now = self.clock()
        names = {name for report in reports.values() for name in report}
        for name in sorted(names):
            held = self._majority(name, reports)
            mine = Position(local.get(name, 0))
            merged = spec.inputs.get(name)
            short = self._short.get(name)
            # all it lacks is merged already: it need not hold it (unless it got there by
            # planning from a peer's copy: that catches up in turns of fetch_after_ms, and
            # must not restart the count at each)
            merged_all = (
                merged is not None and held <= Position(merged) and name not in self._from_peer
            )
            if short is None and (held <= mine or merged_all):
                self._behind_since.pop(name, None)
                self._still_since.pop(name, None)
                continue
            since = self._behind_since.get(name)
            target = self._behind_target.get(name)
            if since is None or (short is None and target is not None and target <= mine):
                # fell behind just now, or has since caught up with what a majority held
                # then: the count of how long it lags starts again
                since = self._behind_since[name] = now
                self._behind_target[name] = held
            if self._mine.get(name) != mine or name not in self._still_since:
                self._still_since[name] = now  # its copy grew (or the count just began)
            self._mine[name] = mine
            stalled = self._stalled_since(name)
            assert stalled is not None
            if self.behind is None:
                continue
            if now - stalled >= self._behind_after_s:
                why = short or (
                    f"this node holds up to {mine.format()}, a majority up to "
                    f"{held.format()}, and its copy has not grown"
                )
                self.behind(f"{name}: {why}, for {now - stalled:.1f} s")
            elif now - since >= LEADER_INPUT_LAGGING_S:
                self.behind(
                    f"{name}: this node holds up to {mine.format()}, a majority up to "
                    f"{held.format()}: its copy has trailed a majority's for {now - since:.1f} s"
                )

    def _stalled_since(self, name: str) -> float | None:
        """Since when this leader's own copy of ``name`` has lacked what a majority holds
        and not grown (a copy cut short or lacking a file: since it lacked it at all);
        None while it lacks nothing.

        A busy leader's copy at full speed trails the followers' by a second or more
        and keeps growing: its push server is slower, not gone, and any node leading
        would be as slow. That is not a copy to hand over or to read a peer's for."""
        since = self._behind_since.get(name)
        if since is None or name in self._short:
            return since
        return max(since, self._still_since.get(name, since))

    def _records(
        self,
        name: str,
        spec: SequencerState,
        reports: dict[str, dict[str, int]],
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Records | None:
        """The records of ``name`` to merge next, below what a majority holds: from this
        node's copy, else, once it has lacked them ``fetch_after_ms``, from a peer's."""
        known = spec.inputs.get(name)
        start = Position(known) if known is not None else None
        held = self._majority(name, reports)
        if start is not None and held <= start:
            return self._carried_records(name, start, reports, ends)
        records = self._own_records(name, start, held, reports, ends)
        if records is None and self._peer_read_due(name):
            records = self._peer_records(name, start, held, reports, ends)
        if records is None and start is None and self.carrying:  # an input's first range
            first = self.inputs.get(name).first_record()
            if first is not None and held <= first:
                records = self._carried_records(name, first, reports, ends)
        return records

    def _carried_records(
        self,
        name: str,
        start: Position,
        reports: dict[str, dict[str, int]],
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Records | None:
        """Records of ``name`` from ``start`` that no majority reported holding yet, from
        this node's copy as its push server wrote it (synced or not), to carry in the raft
        entry itself: within ``CARRY_MAX_BYTES`` in flight, in the file ``start`` is in, or,
        where that file ended as this node's push server saw it, in the next one.

        Committing the entry then makes the bytes durable on a majority (in their raft
        journals), as a majority's reports did before: the merge waits for no report and no
        input sync. Larger ranges wait for the reports."""
        if not self.carrying:
            return None
        room = min(CARRY_MAX_BYTES - self._carried_inflight, self.config.sequencer.max_range_bytes)
        if room <= 0:
            return None
        source = self.inputs.get(name)
        records = source.read_written(start, room)
        if records is None:
            moved_on = self._moved_on(name, start, reports, ends)
            if moved_on is not None:
                records = source.read_written(moved_on, room)
        if records is None or len(records.data) > room:  # one record larger than the room
            return None
        return _Carried(
            records.start, records.end, records.data, records.ids, records.offsets, records.first_ts
        )

    def _own_records(
        self,
        name: str,
        start: Position | None,
        held: Position,
        reports: dict[str, dict[str, int]],
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Records | None:
        source = self.inputs.get(name)
        pos = start if start is not None else source.first_record()
        if pos is None or held <= pos:
            return None
        self._short.pop(name, None)
        if held.file_key > pos.file_key:
            end = source.file_end(pos)
            if end is None:
                self._short[name] = (
                    f"this node lacks the file of {pos.format()}, which a majority holds"
                )
                return None
            if pos.offset >= end:
                nxt = self._moved_on(name, pos, reports, ends)
                if nxt is None:
                    ended = Position.of(pos.session, pos.roll, end)
                    problem = self._end_disputed(name, ended, ends)
                    if problem is not None:
                        self._short[name] = problem
                        return None
                    nxt = source.next_file_start(pos)
                if nxt is None or held <= nxt:
                    return None
                pos = nxt
        records = source.read(pos, held, self.config.sequencer.max_range_bytes)
        if records is None and held.file_key > pos.file_key:  # a whole file on a majority
            self._short[name] = f"this node's copy holds no whole record at {pos.format()}"
        return records

    def _peer_read_due(self, name: str) -> bool:
        """Whether this node's own copy of ``name`` has lacked what a majority holds for
        ``fetch_after_ms``, so that a peer's copy is read (by a step that may fetch)."""
        since = self._stalled_since(name)
        if self.fetcher is None or since is None:
            return False
        if self.clock() - since < self._fetch_after_s:
            return False
        if not self.may_fetch:
            self.wants_fetch = True
            return False
        return True

    def _peer_records(
        self,
        name: str,
        start: Position | None,
        held: Position,
        reports: dict[str, dict[str, int]],
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Records | None:
        """Read the records from the peers holding most of ``name``, one after another
        (not one that failed in the last ``PLAN_FETCH_PENALTY_S``), until one gives them."""
        read = self._from_peer.get(name)  # read last time, for a range not proposed then
        if read is not None and read.start == start and read.end <= held:
            return read
        floor = start if start is not None else Position(0)
        now = self.clock()
        peers = [
            p
            for p, r in reports.items()
            if p != self.node_name and r.get(name, 0) > floor and self._failed_until.get(p, 0) < now
        ]
        peers.sort(key=lambda p: -reports[p][name])
        for peer in peers:
            try:
                records = self._read_peer(peer, name, start, held, ends)
            except RTError as exc:
                log.info("planner: reading in/%s from %s failed: %s", name, peer, exc)
                self._failed_until[peer] = self.clock() + PLAN_FETCH_PENALTY_S
                continue
            if records is not None:
                self._from_peer[name] = records
                if name not in self._peer_told:
                    self._peer_told.add(name)
                    at = records.start
                    log.warning(
                        "planner: planning %s from %s's copy from log.%d.%d offset %d on: "
                        "this node's own copy lacks what a majority holds",
                        name,
                        peer,
                        at.session,
                        at.roll,
                        at.offset,
                    )
                return records
        return None

    def _read_peer(
        self,
        peer: str,
        name: str,
        start: Position | None,
        held: Position,
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Records | None:
        """The whole records of ``peer``'s copy of ``name`` from ``start`` (None: from its
        oldest file), below ``held``; at most one file's end is crossed, as a majority's
        copies of that file agree."""
        directory, most = f"in/{name}", self.config.sequencer.max_range_bytes
        if start is None:  # nothing of it merged yet
            oldest = self._fetch(peer, directory, Position(0), 0).oldest
            start = None if oldest is None else self._first_record(peer, directory, oldest)
            if start is None or held <= start:
                return None
        got = self._fetch(peer, directory, start, most)
        if got.missing:
            return None
        if not got.data:  # the peer's copy of that file ends here
            if got.next_file is None or got.file_size != start.offset:
                return None
            if held.file_key <= start.file_key:
                return None
            problem = self._end_disputed(name, start, ends, f"{peer}'s")
            if problem is not None:
                self._short[name] = problem
                return None
            start = self._first_record(peer, directory, got.next_file)
            if start is None or held <= start:
                return None
            got = self._fetch(peer, directory, start, most)
            if got.missing or not got.data:
                return None
        stop = held.offset if held.file_key == start.file_key else got.file_size
        data = got.data[: max(0, stop - start.offset)]
        records = whole_records(start, data)
        length = first_record_bytes(data)
        if records is None and len(data) < length <= stop - start.offset:  # a large record
            assert self.fetcher is not None
            whole = fetch_range(
                self.fetcher, peer, directory, start, start.with_offset(start.offset + length)
            )
            records = None if whole is None else whole_records(start, whole)
        return records

    def _first_record(self, peer: str, directory: str, file_start: Position) -> Position | None:
        """Where the records of ``peer``'s file at ``file_start`` begin (after its header)."""
        got = self._fetch(peer, directory, file_start, MAX_FILE_HEADER_BYTES)
        header = decode_file_header(got.data) if got.data else None
        if header is None or isinstance(header, str):
            return None
        return file_start.with_offset(header.header_bytes)

    def _fetch(self, peer: str, directory: str, at: Position, most: int) -> Fetched:
        assert self.fetcher is not None
        return self.fetcher.fetch(peer, directory, at, most, PLAN_FETCH_TIMEOUT_S)

    def _done(self, epoch: int, carried: int, accepted: bool, why: str) -> None:
        with self._lock:
            if epoch != self._epoch:
                return  # planned under an earlier leadership: already forgotten
            self._inflight -= 1
            self._carried_inflight -= carried
            if not accepted:
                self.failed += 1
                log.info(
                    "planner: a proposal failed (%s); replanning from the committed state", why
                )
                self._spec = None
        self.wake()

    def _moved_on(
        self,
        name: str,
        at: Position,
        reports: dict[str, dict[str, int]],
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Position | None:
        """Where the records of the file after ``at``'s begin, if ``at`` is where that file
        of ``name`` ended as this node's push server saw it (its sender moved on from it
        there) and no other node said its copy of the file goes on past ``at``.

        The sender reads its files in order and starts the next one only once it has
        sent every whole record of the last from where this node's copy ends: this node
        saw the file end. A copy a node said is longer is left to :meth:`_end_disputed`
        (the publisher lost the end of that file after sending it there, say)."""
        ended = self.inputs.get(name).ended(at.file_key)
        if ended is None or ended.end != at.offset:
            return None
        for node, report in reports.items():
            theirs = Position(report.get(name, 0))
            if node != self.node_name and theirs.file_key == at.file_key and theirs > at:
                return None
        for node, said in ends.items():
            for end in said.get(name, ()) if said is not None and node != self.node_name else ():
                if Position(end).file_key == at.file_key and Position(end) > at:
                    return None
        return ended.next_start

    def _end_disputed(
        self,
        name: str,
        end: Position,
        ends: dict[str, dict[str, list[int]] | None],
        whose: str = "this node's",
    ) -> str | None:
        """Why the plan cannot move past ``end``, where ``whose`` copy of a file of
        ``name`` ends (this node's, or a peer's read for it), or None once a majority's
        copies of it are known, none longer.

        A copy is cut short by damage, never made longer, so the longest copy known is
        the file as written; and whatever a publisher was told is held, a majority
        held: some node of any majority still holds it, unless damage took it since."""
        own = whose == "this node's"
        known = 1 if own else 0  # this node's own copy, when it is the one read
        for node, said in sorted(ends.items()):
            if node == self.node_name:
                continue
            if said is None:  # an earlier release does not say: taken as agreeing
                known += 1
                continue
            theirs = [Position(p) for p in said.get(name, ())]
            same = [p for p in theirs if p.file_key == end.file_key]
            if not same:
                continue  # it lacks that file, or is still writing it: not known
            if same[0].offset > end.offset:
                return (
                    f"{whose} copy of that file ends at {end.format()}, {node}'s "
                    f"at {same[0].format()}"
                )
            known += 1
        nodes = len(self.config.nodes)
        if known > nodes // 2:
            return None
        return (
            f"{whose} copy of that file ends at {end.format()}; only {known} of "
            f"{nodes} nodes' copies of it are known"
        )

    def _majority(self, name: str, reports: dict[str, dict[str, int]]) -> Position:
        nodes = len(self.config.nodes)
        extents = [r.get(name, 0) for r in reports.values()]
        return majority_extent(extents, nodes)

    def _next(
        self,
        spec: SequencerState,
        reports: dict[str, dict[str, int]],
        ends: dict[str, dict[str, list[int]] | None],
    ) -> Merge | Skip | None:
        best = None
        names = set(self.inputs.names()).union(*(r.keys() for r in reports.values()))
        for name in sorted(names):
            records = self._records(name, spec, reports, ends)
            if records is not None and (best is None or records.first_ts < best[0]):
                best = (records.first_ts, name, records)
        if best is None:
            return None
        _, name, records = best
        ts = wall_ns()
        seq = spec.seq + 1
        basis = spec.watermark_of(name)
        record, count, watermark = build_record(
            name, int(records.start), ts, seq, records.data, basis, records
        )
        if count == 0:  # every record a dedup message merged before: only the input moves
            return Skip(name, int(records.start), int(records.end), ts, basis)
        return Merge(
            seq=seq,
            position=spec.next_position(len(record)),
            dir=name,
            start=int(records.start),
            end=int(records.end),
            count=count,
            nbytes=len(record),
            crc=zlib.crc32(record),
            ts=ts,
            watermark=watermark,
            basis=basis,
            data=records.data if isinstance(records, _Carried) else None,
        )
