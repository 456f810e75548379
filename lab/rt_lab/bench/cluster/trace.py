"""``rt bench cluster --measure trace``: where a message's time goes, step by step.

The stream runs with tracing on (``RT_TRACE_DIR``, :mod:`rt_appliance.trace`): every
process (node, daemon, application) notes when each input position, raft index and
merged position passed each of its steps, and the subscribing application when it read
each input's ids. After the run every message published is read back from the leader's
``in/`` (its input, its end position, its publish timestamp) and placed on those marks
(:mod:`rt_lab.bench.tracemap`). The result is, per step, the time since publish (p50,
p99) and the time since the step before (p50), plus the nodes' and the applications'
share of one core over the run, and the nodes' over ``--quiet-seconds`` before it with
no traffic at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance import trace
from rt_appliance.log.naming import parse_publisher_dir
from rt_appliance.subscribe import Subscriber
from rt_lab.bench.cluster.harness import (
    LATENCY_TICK_S,
    PUBLISHERS,
    SUBSCRIBER,
    Bench,
    Child,
    ClusterBenchOptions,
    Progress,
    cpu_seconds,
    latency_traffic,
    started,
)
from rt_lab.bench.stats import Result, percentile
from rt_lab.bench.tracemap import STEPS, Message, Trace, step_times, summarize

__all__ = ["StepFigures", "TraceResults", "TraceRun", "measure_trace"]

CLIENT_DAEMONS = ("push-client", "pull-client")  # with --clients daemons
# the rows of the CPU table: the nodes' processes (rt node), the client daemons if any,
# and the applications (with the clients in process, their push and pull clients' too)
CPU_ROWS = ("node", *CLIENT_DAEMONS, "applications")
# The quiet phase's CPU is measured from this long after the subscriber connected: what a
# start costs (handshakes, connections, first reports) is not an idle stream's.
QUIET_SETTLE_S = 3.0


@dataclass(frozen=True, slots=True)
class StepFigures:
    step: str
    meaning: str
    p50_ms: float | None  # since publish
    p99_ms: float | None
    step_p50_ms: float | None  # since the step before
    messages: int  # messages seen at this step


@dataclass(frozen=True, slots=True)
class TraceRun:
    rate: int  # msg/s in total
    messages: int
    steps: list[StepFigures]
    cpu: dict[str, float]  # daemon (role-host) -> share of one core over the run
    idle_cpu: dict[str, float]  # the same with no traffic


def measure_trace(
    opts: ClusterBenchOptions, work: Path, progress: Progress, quiet: bool = False
) -> TraceRun:
    """One traced run at ``opts.latency_rate`` msg/s in total; with ``quiet``, first the
    nodes' CPU with no traffic, on a stream of its own that is not traced (writing the
    trace adds to what an idle node spends)."""
    idle_cpu = _quiet_cpu(opts, work / "quiet", progress) if quiet else {}
    trace_dir = work / "trace"
    os.environ[trace.ENV] = str(trace_dir)
    try:
        return _traced_run(opts, work, progress, trace_dir, idle_cpu)
    finally:
        os.environ.pop(trace.ENV, None)


def _node_pids(b: Bench, opts: ClusterBenchOptions) -> dict[str, int]:
    """Each node's process (the harness keys it as its unit, the sequencer), and the
    client daemons' with ``--clients daemons``."""
    pids = {f"node-{host}": pid for host, pid in b.pids("sequencer").items()}
    for role in CLIENT_DAEMONS if not opts.in_process else ():
        pids.update({f"{role}-{host}": pid for host, pid in b.pids(role).items()})
    return pids


def _quiet_cpu(opts: ClusterBenchOptions, work: Path, progress: Progress) -> dict[str, float]:
    """The daemons' CPU over ``opts.quiet_s`` with no traffic, a subscriber connected,
    from ``QUIET_SETTLE_S`` after it connected."""
    with Bench(opts, work, progress) as b:
        skip = started(b)
        b.wait_leader()
        sub = b.subscriber(expected=skip + 1, skip=skip, latency=True)
        pids = _node_pids(b, opts)
        time.sleep(QUIET_SETTLE_S)
        idle_cpu = _cpu_share(pids, lambda: time.sleep(opts.quiet_s))
        sub.kill()
    return idle_cpu


def _traced_run(
    opts: ClusterBenchOptions,
    work: Path,
    progress: Progress,
    trace_dir: Path,
    idle_cpu: dict[str, float],
) -> TraceRun:
    rate, count = latency_traffic(opts)
    with Bench(opts, work, progress) as b:
        skip = started(b)
        leader = b.wait_leader()
        expected = skip + count * len(PUBLISHERS)
        sub = b.subscriber(expected=expected, skip=skip, latency=True)
        pids = _node_pids(b, opts)
        pubs: list[Child] = []

        def traffic() -> None:
            pubs.extend(b.publishers(count, rate=rate, tick_s=LATENCY_TICK_S))
            b.wait_subscriber(sub, "trace", expected)

        began = time.monotonic()
        cpu = _cpu_share(pids, traffic)
        elapsed = time.monotonic() - began
        published = [p.finish() for p in pubs]
        got = sub.finish()
        # each application reports its own CPU (every thread: with the clients in process,
        # their push or pull client's too)
        cpu["applications"] = (
            float(got["cpu_s"]) + sum(float(p["cpu_s"]) for p in published)
        ) / elapsed
        in_dir = b.stream.config.data_dir_of(b.stream.config.node(leader)) / "in"
        nodes = list(b.stream.node_names)
    # the daemons have stopped: every trace file is complete
    since = min(int(p["first_ns"]) for p in published)
    messages = [m for m in _messages(in_dir) if m.published_ns >= since]
    traced = Trace.load(trace_dir)
    per_message = [step_times(traced, m, leader, nodes, SUBSCRIBER) for m in messages]
    total = rate * len(PUBLISHERS)
    return TraceRun(total, len(messages), _figures(per_message), cpu, idle_cpu)


def _cpu_share(pids: dict[str, int], work: Callable[[], None]) -> dict[str, float]:
    """Each process's share of one core while ``work()`` runs."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    began = time.monotonic()
    work()
    seconds = time.monotonic() - began
    return {name: (cpu_seconds(pid) - before[name]) / seconds for name, pid in pids.items()}


def _messages(in_dir: Path) -> list[Message]:
    """Every message in a node's inputs, with its input's end position after it."""
    out: list[Message] = []
    for d in sorted(p for p in in_dir.iterdir() if p.is_dir()):
        parsed = parse_publisher_dir(d.name)
        if parsed is None:
            continue
        topic, host = parsed
        for m in Subscriber(d).read():
            out.append(Message(d.name, int(m.next_position), m.timestamp_ns, host, topic))
    return out


def _figures(per_message: list[dict[str, int | None]]) -> list[StepFigures]:
    meanings = dict(STEPS)
    rows = []
    for name, since, step in summarize(per_message):
        rows.append(
            StepFigures(
                step=name,
                meaning=meanings[name],
                p50_ms=percentile(since, 50) if since else None,
                p99_ms=percentile(since, 99) if since else None,
                step_p50_ms=percentile(step, 50) if step else None,
                messages=len(since),
            )
        )
    return rows


@dataclass(slots=True)
class TraceResults:
    """The trace's figures over several runs, as report rows: per step p50 and p99 at
    each rate, and the daemons' CPU (all of them, and per role) at each rate and idle."""

    idle_rate: int
    rate: int
    rows: dict[str, Result] = field(default_factory=dict)

    @property
    def rates(self) -> tuple[int, int]:
        return (self.idle_rate, self.rate)

    def _row(self, name: str, unit: str, target: str = "-", note: str = "") -> Result:
        if name not in self.rows:
            self.rows[name] = Result(name, unit, target, note=note)
        return self.rows[name]

    def add(self, run: TraceRun) -> None:
        at = f"{run.rate:,} msg/s"
        busy = run.rate >= self.rate
        for s in run.steps:
            note = s.meaning
            if s.p50_ms is not None:
                self._row(f"trace p50 at {at}: publish -> {s.step}", "ms", note=note).values.append(
                    s.p50_ms
                )
            if s.p99_ms is not None:
                self._row(f"trace p99 at {at}: publish -> {s.step}", "ms", note=note).values.append(
                    s.p99_ms
                )
        self._cpu(run.cpu, f"at {at}", "<= 40" if busy else "-")
        if run.idle_cpu:
            self._cpu(run.idle_cpu, "with no traffic", "<= 2")

    def _cpu(self, cpu: dict[str, float], when: str, target: str) -> None:
        note = "share of one core, summed over the daemons (both publishers' and the nodes')"
        total = self._row(f"daemons' CPU {when}: all", "% of a core", target, note)
        total.values.append(100 * sum(v for k, v in cpu.items() if k != "applications"))
        for role in CPU_ROWS:
            mine = [v for k, v in cpu.items() if k == role or k.startswith(role + "-")]
            if not mine:
                continue  # no such process in this run
            share = sum(mine)
            self._row(f"daemons' CPU {when}: {role}", "% of a core", note=note).values.append(
                100 * share
            )

    def results(self) -> list[Result]:
        return list(self.rows.values())

    @staticmethod
    def summary(run: TraceRun) -> str:
        """One progress line: the last step's p50 and p99, and the CPU in all."""
        last = run.steps[-1]
        p50 = "-" if last.p50_ms is None else f"{last.p50_ms:.2f}"
        p99 = "-" if last.p99_ms is None else f"{last.p99_ms:.2f}"
        idle = f" ({100 * _daemons(run.idle_cpu):.1f}% with no traffic)" if run.idle_cpu else ""
        return (
            f"trace at {run.rate:,} msg/s: {run.messages:,} messages, delivered p50 {p50} ms, "
            f"p99 {p99} ms; daemons' CPU {100 * _daemons(run.cpu):.1f}% of a core{idle}, "
            f"applications {100 * run.cpu.get('applications', 0.0):.1f}%"
        )


def _daemons(cpu: dict[str, float]) -> float:
    return sum(v for k, v in cpu.items() if k != "applications")
