"""Map messages onto the trace points the daemons wrote (:mod:`rt_appliance.trace`).

A trace says when each byte stream reached which mark: an input position at a node,
a raft index, a merged position. A message is a record that ends at input position
``end``; it has passed a point once that point's mark for its input reached ``end``.
Raft and merged-log points are reached through the merge that carried the message:
the leader's ``applied`` event names the raft index and merged seq of the range that
ends at or after ``end``, and the ``merged`` event the merged position after that seq.

Where a step happens on several nodes, the time that counts is when a majority had
done it (the step the next one waits for), except where only one node's event can be
the next step's cause (the leader's own, the node the subscriber pulls from).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["STEPS", "SUBSCRIBING_APP", "Message", "Trace", "step_times", "summarize"]

SUBSCRIBING_APP = "subscriber-app"  # the trace file name of the subscribing application
NODE_PREFIX = "node-"  # the trace file name of an rt node process, before its node's name
NODE_ROLES = ("push-server", "sequencer", "pull-server")  # what an rt node process runs
# (step, what it means), in path order; the 17 steps of a message
STEPS: tuple[tuple[str, str], ...] = (
    ("published", "the publishing application wrote it (its record timestamp)"),
    ("sent", "the push client sent it to a majority of nodes"),
    ("in", "in a majority of nodes' in/"),
    ("synced", "synced and acknowledged by a majority"),
    ("reported", "the leader knows a majority holds it"),
    ("planned", "the leader planned the range"),
    ("proposed", "handed to raft"),
    ("journal leader", "the leader's raft journal synced the entry"),
    ("entries follower", "a follower received the entry"),
    ("journal follower", "a follower's raft journal synced it"),
    ("answered", "the leader has the follower's answer"),
    ("committed", "the leader's commit index covers it"),
    ("applied", "applied to the leader's state machine"),
    ("merged", "in the leader's merged log"),
    ("pulled", "sent by the subscriber's pull server"),
    ("copied", "in the subscriber's copy"),
    ("delivered", "read by Subscriber.read(follow=True)"),
)


@dataclass(frozen=True, slots=True)
class Message:
    input: str  # <topic>.<host>, the input directory's name
    end: int  # input position after the record
    published_ns: int
    host: str
    topic: str


@dataclass(slots=True)
class _Marks:
    """One point's marks for one key: times and the highest value reached by then."""

    times: list[int] = field(default_factory=list)
    highest: list[int] = field(default_factory=list)

    def add(self, t: int, value: int) -> None:
        top = max(value, self.highest[-1]) if self.highest else value
        self.times.append(t)
        self.highest.append(top)

    def reached(self, value: int) -> int | None:
        """When the mark first reached ``value`` (None: never)."""
        i = bisect.bisect_left(self.highest, value)
        return self.times[i] if i < len(self.times) else None


@dataclass(slots=True)
class _Applied:
    ends: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)


class Trace:
    """Every trace file of one run, by process (``sequencer-rt-1``, ``push-client-pub-1``)."""

    def __init__(self) -> None:
        # process -> point -> key -> marks
        self.marks: dict[str, dict[str, dict[str, _Marks]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(_Marks))
        )
        self.applied: dict[str, dict[str, _Applied]] = defaultdict(lambda: defaultdict(_Applied))
        self.merged: dict[str, _Marks] = defaultdict(_Marks)  # process -> seq marks
        self.merged_at: dict[str, dict[int, int]] = defaultdict(dict)  # process: seq -> position

    @classmethod
    def load(cls, directory: Path) -> Trace:
        trace = cls()
        for path in sorted(directory.glob("*.trace")):
            process = path.stem.rsplit("-", 1)[0]
            with path.open() as f:
                trace.add_lines(process, f)
        for process in list(trace.marks):
            if process.startswith(NODE_PREFIX):  # rt node: the three roles in one process
                node = process[len(NODE_PREFIX) :]
                for role in NODE_ROLES:
                    trace.alias(f"{role}-{node}", process)
        return trace

    def alias(self, name: str, process: str) -> None:
        """Let ``name`` (a role's process) find the marks ``process`` wrote."""
        self.marks[name] = self.marks[process]
        self.applied[name] = self.applied[process]
        self.merged[name] = self.merged[process]
        self.merged_at[name] = self.merged_at[process]

    def add_lines(self, process: str, lines: Iterable[str]) -> None:
        """Take one process's lines, in the order it wrote them."""
        index = 0
        for line in lines:
            parts = line.split()
            if len(parts) < 4:
                continue  # a line cut short when the process was killed
            t, point, key, values = int(parts[0]), parts[1], parts[2], parts[3:]
            if point == "apply":
                index = int(values[0])
            elif point == "applied":
                a = self.applied[process][key]
                a.ends.append(int(values[0]))
                a.seqs.append(int(values[1]))
                a.indexes.append(index)
                a.times.append(t)
            elif point == "merged":
                seq, position = int(values[0]), int(values[1])
                self.merged[process].add(t, seq)
                self.merged_at[process].setdefault(seq, position)
            else:
                self.marks[process][point][key].add(t, int(values[0]))

    def reached(self, process: str, point: str, key: str, value: int) -> int | None:
        marks = self.marks.get(process, {}).get(point, {}).get(key)
        return marks.reached(value) if marks is not None else None


def _kth(times: Iterable[int | None], k: int) -> int | None:
    known = sorted(t for t in times if t is not None)
    return known[k - 1] if len(known) >= k else None


def step_times(
    trace: Trace, message: Message, leader: str, nodes: Sequence[str], subscriber: str
) -> dict[str, int | None]:
    """When ``message`` passed each of :data:`STEPS` (ns since the epoch; None: unseen)."""
    k = len(nodes) // 2 + 1
    followers = [n for n in nodes if n != leader]
    pub = f"push-client-{message.host}"
    seq_proc = f"sequencer-{leader}"
    inp, end = message.input, message.end
    out: dict[str, int | None] = {"published": message.published_ns}

    def per_node(process: str | None, point: str) -> list[int | None]:
        return [
            trace.reached(process or f"push-server-{n}", point, f"{n}/{inp}", end) for n in nodes
        ]

    out["sent"] = _kth(per_node(pub, "send"), k)
    out["in"] = _kth(per_node(None, "in"), k)
    out["synced"] = _kth(per_node(None, "synced"), k)
    own = trace.reached(f"push-server-{leader}", "synced", f"{leader}/{inp}", end)
    reports = [trace.reached(seq_proc, "reported", f"{n}/{inp}", end) for n in followers]
    out["reported"] = _kth([own, *reports], k)
    out["planned"] = trace.reached(seq_proc, "planned", inp, end)
    out["proposed"] = trace.reached(seq_proc, "proposed", inp, end)
    applied = trace.applied.get(seq_proc, {}).get(inp)
    i = bisect.bisect_left(applied.ends, end) if applied is not None else 0
    out["delivered"] = _delivered(trace, message)
    if applied is None or i >= len(applied.ends):
        return {name: out.get(name) for name, _ in STEPS}
    index, seq = applied.indexes[i], applied.seqs[i]
    out["journal leader"] = trace.reached(seq_proc, "jsynced", leader, index)
    # the followers that make a majority with the leader: the k-1th to do each step
    out["entries follower"] = _kth(
        [trace.reached(f"sequencer-{n}", "entries", n, index) for n in followers], k - 1
    )
    out["journal follower"] = _kth(
        [trace.reached(f"sequencer-{n}", "jsynced", n, index) for n in followers], k - 1
    )
    out["answered"] = _kth([trace.reached(seq_proc, "answer", n, index) for n in followers], k - 1)
    out["committed"] = trace.reached(seq_proc, "commit", leader, index)
    out["applied"] = applied.times[i]
    merged = trace.merged.get(seq_proc)
    out["merged"] = merged.reached(seq) if merged is not None else None
    position = _merged_position(trace, seq, [leader, *followers])
    if position is not None:
        out["pulled"] = _kth(
            [
                trace.reached(f"pull-server-{n}", "pulled", f"{n}/{subscriber}", position)
                for n in nodes
            ],
            1,
        )
        # a pull-client daemon, or the application's own pull client (Subscriber(pull=))
        out["copied"] = trace.reached(
            f"pull-client-{subscriber}", "copy", subscriber, position
        ) or trace.reached(SUBSCRIBING_APP, "copy", subscriber, position)
    return {name: out.get(name) for name, _ in STEPS}


def _merged_position(trace: Trace, seq: int, nodes: Sequence[str]) -> int | None:
    """The merged position after record ``seq`` (every node writes the same)."""
    for n in nodes:
        at = trace.merged_at.get(f"sequencer-{n}", {})
        if seq in at:
            return at[seq]
    return None


def _delivered(trace: Trace, message: Message) -> int | None:
    """When the subscribing application read the message: its mark is the newest publish
    timestamp read from each input (a publisher's timestamps only grow)."""
    key = f"{message.host}/{message.topic}"
    return trace.reached(SUBSCRIBING_APP, "delivered", key, message.published_ns)


def summarize(
    per_message: Sequence[Mapping[str, int | None]],
) -> list[tuple[str, list[float], list[float]]]:
    """Per step: (name, ms since publish per message, ms since the step before)."""
    rows = []
    previous = "published"
    for name, _ in STEPS[1:]:
        since, step = [], []
        for times in per_message:
            t, t0, tp = times.get(name), times["published"], times.get(previous)
            if t is None or t0 is None:
                continue
            since.append((t - t0) / 1e6)
            if tp is not None:
                step.append((t - tp) / 1e6)
        rows.append((name, since, step))
        previous = name
    return rows
