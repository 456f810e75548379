"""Samples a chaos stream's progress: every node's status each second (the timeline,
recovery times), and where a majority's merged logs end every :data:`MARK_S` (how long
merging stood still around each fault)."""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import NodeStatus, gather_status, leader_of
from rt_lab.testing.stream import LocalStream

__all__ = [
    "End",
    "Mark",
    "Monitor",
    "Sample",
    "majority_end",
    "moved_after",
    "recovery_time",
    "stall_time",
]

INTERVAL_S = 1.0
ASK_TIMEOUT_S = 1.5
MARK_S = 0.2  # how often the merged logs' ends are read (from disk: no request to a node)

End = tuple[int, int, int]  # a merged log's newest file (session, roll) and its size
Mark = tuple[float, End]  # (seconds since the start, where a majority's merged logs end)


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # seconds since the run started
    leader: str | None
    commit_index: dict[str, int]  # reachable nodes only
    merged_seq: dict[str, int]  # merge instructions each reachable node has written
    merged_bytes: int  # the most any node has merged (sum of its files' sizes)
    # what each reachable node's merger has still to write, and how many merges it has
    # built from a peer's input so far (a node whose copy is behind or damaged)
    committed_seq: dict[str, int] = field(default_factory=dict)
    fetched_inputs: dict[str, int] = field(default_factory=dict)


class Monitor:
    """Two threads: one asks every node's status each :data:`INTERVAL_S`, the other
    reads where the merged logs end each :data:`MARK_S`.

    The marks have a thread of their own because a status round waits up to
    :data:`ASK_TIMEOUT_S` for a node that does not answer (paused, cut off, its disk
    full): marks taken between rounds would go blind for exactly the faults they time.
    """

    def __init__(self, stream: LocalStream, t0: float) -> None:
        self.stream, self.t0 = stream, t0
        self.samples: list[Sample] = []
        self.marks: list[Mark] = []  # where a majority's merged logs end, over time
        self.exits: list[str] = []  # daemons that exited on their own (not killed by a fault)
        self._seen_exits: set[int] = set()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._every, args=args, name=name, daemon=True)
            for name, args in (
                ("chaos-monitor", (INTERVAL_S, self._round)),
                ("chaos-marks", (MARK_S, self._mark)),
            )
        ]

    def start(self) -> Monitor:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _every(self, period_s: float, step: Callable[[float], None]) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            step(began)
            self._stop.wait(max(0.0, period_s - (time.monotonic() - began)))

    def _round(self, began: float) -> None:
        config, names = self.stream.config, self.stream.node_names
        try:
            answers = asyncio.run(gather_status(config, names[0], ASK_TIMEOUT_S, names))
        except Exception:  # a status round failing is a gap in the timeline, nothing more
            answers = {}
        nodes = [a for a in answers.values() if isinstance(a, NodeStatus)]
        merged = 0
        for name in names:
            try:
                files = self.stream.merged_dir(name).glob("log.*")
                merged = max(merged, sum(f.stat().st_size for f in files))
            except OSError:
                continue
        self.samples.append(
            Sample(
                round(began - self.t0, 2),
                leader_of(answers) if answers else None,
                {n.name: n.commit_index for n in nodes},
                {n.name: n.merged_seq for n in nodes},
                merged,
                {n.name: n.committed_seq for n in nodes},
                {n.name: int(n.raw.get("fetched_inputs") or 0) for n in nodes},
            )
        )
        self._note_exits(began - self.t0)

    def _mark(self, began: float) -> None:
        """Note where the stream's merged log ends: :func:`majority_end` of the nodes'."""
        ends = []
        for name in self.stream.node_names:
            try:
                files = list_files(self.stream.merged_dir(name))
                if files:
                    newest = files[-1]
                    ends.append((newest.session, newest.roll, newest.path.stat().st_size))
            except OSError:  # a file pruned or a disk swapped meanwhile: next time
                continue
        end = majority_end(ends, len(self.stream.node_names))
        if end is not None:
            self.marks.append((round(began - self.t0, 2), end))

    def _note_exits(self, t: float) -> None:
        """Record daemons that exited with anything but SIGKILL (which only faults send)."""
        for name, daemon in list(self.stream.daemons.items()):
            proc = daemon.proc
            if proc is None or proc.pid in self._seen_exits:
                continue
            code = proc.poll()
            if code is not None and code != -signal.SIGKILL:
                self._seen_exits.add(proc.pid)
                self.exits.append(f"{name} exited with status {code} at {t:.0f}s")


def recovery_time(samples: list[Sample], healed_at: float, nodes: int) -> float | None:
    """Seconds from ``healed_at`` until every node answers, a leader is named, and the
    stream moves again: a node has merged past the furthest any had at ``healed_at``,
    or every node has caught up (the same commit index and merged sequence
    everywhere: nothing left to move once the publishers have stopped). None if
    never. Merged sequences, not bytes: the archiver's pruning makes the bytes shrink."""
    before = [s for s in samples if s.t <= healed_at]
    mark = max((max(s.merged_seq.values(), default=0) for s in before[-3:]), default=0)
    for s in samples:
        if s.t < healed_at or not s.leader or len(s.commit_index) != nodes:
            continue
        caught_up = len(set(s.commit_index.values())) == 1 and len(set(s.merged_seq.values())) == 1
        if max(s.merged_seq.values(), default=0) > mark or caught_up:
            return round(s.t - healed_at, 2)
    return None


def majority_end(ends: list[End], nodes: int) -> End | None:
    """The furthest end a majority of the ``nodes`` nodes' merged logs reach (each end
    is a node's newest file and its size); None if fewer than a majority could be read.

    Not the furthest of any one node: one node's end can be bytes it cuts off again (a
    write that failed part-way on a full disk, unsynced bytes a power loss takes), and
    that size would stand as a high-water mark the others must pass before merging
    counts as moving. What a majority holds is what the stream has merged."""
    majority = nodes // 2 + 1
    if len(ends) < majority:
        return None
    return sorted(ends, reverse=True)[majority - 1]


def _advances(marks: list[Mark]) -> list[float]:
    """When the furthest merged end moved past the furthest seen before."""
    advances: list[float] = []
    top: tuple[int, int, int] | None = None
    for t, end in marks:
        if top is not None and end > top:
            advances.append(t)
        top = end if top is None else max(top, end)
    return advances


def moved_after(marks: list[Mark], t: float) -> float | None:
    """When merging first moved after ``t`` (None: never)."""
    return next((a for a in _advances(marks) if a > t), None)


def stall_time(
    marks: list[Mark], started: float, ended: float, until: float | None = None
) -> float | None:
    """How long merging stood still around a fault from ``started`` to ``ended``: the
    longest time between two advances of the majority's merged end (past the furthest
    seen before), counted from ``started`` up to the first advance after ``ended``. None if
    merging never moved after it. With publishers publishing all along, a stream that
    never stalls shows about :data:`MARK_S`.

    ``until`` is when the next fault began: a stall still going on then is counted up to
    it, not through the next fault's own (a power loss 2 s after a cut file would
    otherwise count as the cut's stall)."""
    advances = _advances(marks)
    after = next((t for t in advances if t > ended), None)
    if until is not None and until > started and (after is None or after > until):
        points = [started, *(t for t in advances if started < t < until), until]
    elif after is None:
        return None
    else:
        points = [started, *(t for t in advances if started < t <= after)]
    return round(max(b - a for a, b in itertools.pairwise(points)), 2)
