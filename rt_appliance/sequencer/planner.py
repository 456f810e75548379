"""The leader's planner: which input range to merge next, proposed through raft.

Every node reports how far it durably holds each input. For an input, the
*majority extent* is the position that a majority of nodes (this one counted)
hold. The planner proposes ranges below the majority extent only, at most
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
from rt_appliance.limits import LEADER_INPUT_BEHIND_S
from rt_appliance.position import Position
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merger import build_record
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.state import Merge, SequencerState, Skip

__all__ = ["Planner", "majority_extent"]

log = logging.getLogger(__name__)


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
    ) -> None:
        self.config, self.node_name = config, node_name
        self.machine, self.inputs, self.raft, self.wake = machine, inputs, raft, wake
        self._lock = threading.Lock()
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
        seq = config.sequencer
        self._behind_after_s = max(LEADER_INPUT_BEHIND_S, seq.fetch_after_ms / 1000)

    def report(
        self, node: str, extents: dict[str, int], ends: dict[str, list[int]] | None = None
    ) -> None:
        """A node's extents, and where its copies of the files from the merged positions
        on end (None: it does not say)."""
        with self._lock:
            self._reports[node] = extents
            self._ends[node] = ends
            self._report_times[node] = time.monotonic()

    def reports(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return dict(self._reports)

    def step(self, budget_bytes: int | None = None) -> int:
        """Propose what can be proposed now; returns how many proposals were made.

        With ``budget_bytes`` the step stops once its proposals cover that many input
        bytes, and :attr:`cut_short` says it did (what is left waits for the next step).
        :attr:`read_bytes` is how many input bytes the step's proposals covered.

        The lock is held only to read and update the bookkeeping, never while input is
        read and records are built: reports and raft's callbacks (on the event loop)
        take the same lock, and must not wait for a step.
        """
        self.read_bytes, self.cut_short = 0, False
        if not self.raft.is_leader():
            with self._lock:
                self._spec = None
            return 0
        if not self.raft.leading_settled():  # the log from earlier terms is still applying
            return 0  # (raft calls on_settled, which wakes the planner, once it is)
        local = self.inputs.extents()
        term = self.raft.term()
        with self._lock:
            self._reports[self.node_name] = local
            if term != self._term:  # a new leadership: nothing planned before it counts
                self._term, self._spec, self._inflight = term, None, 0
                self._epoch += 1
                self._behind_since.clear()  # nor how long an earlier one lacked input
                self._short.clear()
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
            command = merge.encode()
            with self._lock:
                if self._spec is not spec:  # a proposal failed meanwhile: replan next step
                    break
                if spec.apply(command) is None:
                    log.error("planner: own proposal rejected locally: %s", spec.last_reject)
                    self._spec = None
                    break
                self._inflight += 1
                self.proposed += 1
            made += 1
            self.raft.propose(command, partial(self._done, epoch))
            trace.event("proposed", merge.dir, merge.end)
            self.read_bytes += merge.end - merge.start
            if budget_bytes is not None and self.read_bytes >= budget_bytes and made < room:
                self.cut_short = True
                break
        return made

    def _judge_own_copy(
        self, local: dict[str, int], reports: dict[str, dict[str, int]], spec: SequencerState
    ) -> None:
        """Tell :attr:`behind` while this leader lacks, for longer than it takes a push
        to land, input bytes past what is merged that a majority of nodes hold."""
        now = time.monotonic()
        names = {name for report in reports.values() for name in report}
        for name in sorted(names):
            held = self._majority(name, reports)
            mine = Position(local.get(name, 0))
            merged = spec.inputs.get(name)
            short = self._short.get(name)
            if short is None and (
                held <= mine or (merged is not None and held <= Position(merged))
            ):
                self._behind_since.pop(name, None)
                continue
            since = self._behind_since.setdefault(name, now)
            if now - since >= self._behind_after_s and self.behind is not None:
                why = short or (
                    f"this node holds up to {mine.format()}, a majority up to {held.format()}"
                )
                self.behind(f"{name}: {why}, for {now - since:.1f} s")

    def _done(self, epoch: int, accepted: bool, why: str) -> None:
        with self._lock:
            if epoch != self._epoch:
                return  # planned under an earlier leadership: already forgotten
            self._inflight -= 1
            if not accepted:
                self.failed += 1
                log.info(
                    "planner: a proposal failed (%s); replanning from the committed state", why
                )
                self._spec = None
        self.wake()

    def _end_disputed(
        self, name: str, end: Position, ends: dict[str, dict[str, list[int]] | None]
    ) -> str | None:
        """Why the plan cannot move past ``end``, where this node's copy of a file of
        ``name`` ends, or None once a majority's copies of it are known, none longer.

        A copy is cut short by damage, never made longer, so the longest copy known is
        the file as written; and whatever a publisher was told is held, a majority
        held: some node of any majority still holds it, unless damage took it since."""
        known = 1  # this node's own copy
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
                    f"this node's copy of that file ends at {end.format()}, {node}'s "
                    f"at {same[0].format()}"
                )
            known += 1
        nodes = len(self.config.nodes)
        if known > nodes // 2:
            return None
        return (
            f"this node's copy of that file ends at {end.format()}; only {known} of "
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
        for name in self.inputs.names():
            source = self.inputs.get(name)
            known = spec.inputs.get(name)
            pos = Position(known) if known is not None else source.first_record()
            if pos is None:
                continue
            held = self._majority(name, reports)
            if held <= pos:
                continue
            self._short.pop(name, None)
            if held.file_key > pos.file_key:
                end = source.file_end(pos)
                if end is None:
                    self._short[name] = (
                        f"this node lacks the file of {pos.format()}, which a majority holds"
                    )
                    continue
                if pos.offset >= end:
                    ended = Position.of(pos.session, pos.roll, end)
                    problem = self._end_disputed(name, ended, ends)
                    if problem is not None:
                        self._short[name] = problem
                        continue
                    nxt = source.next_file_start(pos)
                    if nxt is None or held <= nxt:
                        continue
                    pos = nxt
            records = source.read(pos, held, self.config.sequencer.max_range_bytes)
            if records is None:
                if held.file_key > pos.file_key:  # a whole file on a majority: damaged here
                    self._short[name] = f"this node's copy holds no whole record at {pos.format()}"
                continue
            if best is None or records.first_ts < best[0]:
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
        )
