"""The whole of ``rt bench cluster``: every chosen measurement, ``runs`` times, gathered
into results with their notes, and the verdicts against the targets."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import RTError
from rt_lab.bench.cluster.failover import measure_failover
from rt_lab.bench.cluster.harness import BATCH, ClusterBenchOptions, Progress, keep_logs
from rt_lab.bench.cluster.latency import STAGES, measure_latency, measure_stages
from rt_lab.bench.cluster.memory import Memory, measure_memory, memory_results
from rt_lab.bench.cluster.merge import measure_merge
from rt_lab.bench.cluster.throughput import measure_throughput
from rt_lab.bench.cluster.trace import TraceResults, measure_trace
from rt_lab.bench.stats import Result

__all__ = ["ClusterReport", "run_cluster_bench", "verdicts"]


@dataclass(slots=True)
class ClusterReport:
    """What ``rt bench cluster`` found."""

    results: list[Result]  # a result without values: every run of it stalled or failed
    problems: list[str]  # stalls and failures, with status and log excerpts
    loads: list[float]  # the machine's 1-minute load average as each run started


def run_cluster_bench(opts: ClusterBenchOptions, progress: Progress) -> ClusterReport:
    """Every chosen measurement, ``opts.runs`` times (memory once).

    A run that stalls or fails is left out of the medians and described in the
    problems (with the nodes' status and the end of the sequencers' logs).
    """
    return Suite(opts, progress).run()


class Suite:
    """Runs the chosen measurements and gathers their results."""

    def __init__(self, opts: ClusterBenchOptions, progress: Progress) -> None:
        self.opts, self.progress = opts, progress
        self.problems: list[str] = []
        self.loads: list[float] = []
        self.attempts: dict[str, int] = {}
        rate = f"{opts.latency_rate:,} msg/s"
        self.e2e = Result(
            "end-to-end throughput, 2 publishers -> subscriber", "msg/s", ">= 500,000"
        )
        self.pub = Result("publish rate during that run (2 publishers)", "msg/s", "-")
        self.elections = Result("new raft terms (elections) during that run", "terms", "-")
        self.merge = Result("sequencer-only merge rate (input already on every node)", "msg/s", "-")
        self.failover = Result(
            "failover: kill -9 the leader's sequencer -> merging again", "s", "<= 2"
        )
        self.elected = Result("failover: kill -9 -> another leader named", "s", "-")
        self.restart = Result("failover: restarted sequencer back in step", "s", "-")
        self.p50 = Result(f"publish-to-subscriber latency p50 at {rate}", "ms", "<= 1")
        self.p99 = Result(f"publish-to-subscriber latency p99 at {rate}", "ms", "<= 5")
        self.worst = Result(f"publish-to-subscriber latency max at {rate}", "ms", "-")
        cores = "% of a core"
        self.cpu_nodes = Result(f"CPU of the 3 nodes' processes at {rate}", cores, "-")
        self.cpu_clients = Result(f"CPU of the push and pull client daemons at {rate}", cores, "-")
        self.cpu_apps = Result(f"CPU of the 3 applications at {rate}", cores, "-")
        self.stages = {
            key: (
                Result(f"stage latency p50 at {rate}: publish -> {name}", "ms", "-"),
                Result(f"stage latency p99 at {rate}: publish -> {name}", "ms", "-"),
            )
            for name, key in STAGES
        }

        self.traces = TraceResults(opts.idle_rate, opts.latency_rate)

    def attempt(self, name: str, run: int, fn: Callable[[Path, int], None]) -> None:
        """``fn(work, run)`` in a fresh work directory; a failure becomes a problem."""
        self.attempts[name] = self.attempts.get(name, 0) + 1
        load = os.getloadavg()[0]
        self.loads.append(load)
        self.progress(f"run {run}/{self.opts.runs}: {name} (load average {load:.1f})")
        work = Path(tempfile.mkdtemp(prefix=f"cluster-{name}-", dir=self.opts.workdir))
        try:
            fn(work, run)
        except (RTError, TimeoutError, OSError) as exc:
            self.problems.append(f"{name}, run {run}: {exc}")
            self.progress(f"  {name} failed: {str(exc).splitlines()[0]}")
            keep_logs(work, self.opts.workdir, f"{name}-run{run}", self.progress)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            os.sync()  # the next run starts without this one's dirty pages

    # -- one run of each measurement --

    def latency(self, work: Path, run: int) -> None:
        got = measure_latency(self.opts, work, self.progress)
        self.p50.values.append(got["p50"])
        self.p99.values.append(got["p99"])
        self.worst.values.append(got["max"])
        self.cpu_nodes.values.append(100 * got["cpu_nodes"])
        self.cpu_clients.values.append(100 * got["cpu_clients"])
        self.cpu_apps.values.append(100 * got["cpu_apps"])
        self.progress(
            f"  p50 {got['p50']:.2f} ms, p99 {got['p99']:.2f} ms, max {got['max']:.1f} ms; "
            f"CPU: nodes {100 * got['cpu_nodes']:.0f}%, client daemons "
            f"{100 * got['cpu_clients']:.0f}%, applications {100 * got['cpu_apps']:.0f}% of a core"
        )

    def stage_latency(self, work: Path, run: int) -> None:
        got = measure_stages(self.opts, work, self.progress)
        for key, (p50, p99) in self.stages.items():
            p50.values.append(got[key]["p50"])
            p99.values.append(got[key]["p99"])
        self.progress(
            "  p50/p99 ms: "
            + ", ".join(f"{key} {got[key]['p50']:.1f}/{got[key]['p99']:.1f}" for key in got)
        )

    def traced(self, work: Path, run: int) -> None:
        for rate in self.traces.rates:
            got = measure_trace(
                dataclasses.replace(self.opts, latency_rate=rate),
                work / f"{rate}",
                self.progress,
                quiet=rate == self.traces.idle_rate,
            )
            self.traces.add(got)
            self.progress("  " + self.traces.summary(got))

    def throughput(self, work: Path, run: int) -> None:
        got = measure_throughput(self.opts, work, self.progress)
        self.e2e.values.append(got.end_to_end)
        self.pub.values.append(got.publish)
        self.elections.values.append(got.elections)
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in sorted(got.cpu.items()))
        self.progress(
            f"  {got.end_to_end:,.0f} msg/s end to end ({got.seconds:.1f} s), "
            f"published at {got.publish:,.0f} msg/s, {got.elections} new raft terms; "
            f"CPU seconds: {cpu}"
        )

    def merged(self, work: Path, run: int) -> None:
        rate = measure_merge(self.opts, work, self.progress)
        self.merge.values.append(rate)
        self.progress(f"  {rate:,.0f} msg/s merged")

    def failovers(self, work: Path, run: int) -> None:
        got = measure_failover(self.opts, work, self.progress)
        self.failover.values.append(statistics.median(k.failover_s for k in got.kills))
        self.elected.values.append(statistics.median(k.elected_s for k in got.kills))
        back = [k.back_s for k in got.kills if k.back_s is not None]
        if back:
            self.restart.values.append(statistics.median(back))
        self.problems.extend(f"failover, run {run}: {note}" for note in got.notes)

    def memory(self) -> list[Result]:
        holder: list[Memory] = []
        self.attempt(
            "memory",
            1,
            lambda work, _: holder.append(measure_memory(self.opts, work, self.progress)),
        )
        return memory_results(self.opts, holder[0] if holder else None)

    # -- all of them --

    def run(self) -> ClusterReport:
        o = self.opts
        steps = [  # latency first: a throughput run leaves the disk writing back
            ("latency", self.latency),
            ("stages", self.stage_latency),
            ("trace", self.traced),
            ("throughput", self.throughput),
            ("merge", self.merged),
            ("failover", self.failovers),
        ]
        for run in range(1, o.runs + 1):
            for name, fn in steps:
                if name in o.measure:
                    self.attempt(name, run, fn)
        self.annotate()
        results = self.measured()
        if "memory" in o.measure and o.memory_messages:
            results.extend(self.memory())
        return ClusterReport(results, self.problems, self.loads)

    def stage_results(self) -> list[Result]:
        return [r for pair in self.stages.values() for r in pair]

    def annotate(self) -> None:
        """Each result's note: what was run to measure it."""
        o = self.opts
        self.e2e.note = f"{o.messages:,} messages per publisher, batches of {BATCH:,}"
        if o.throughput_rate:
            self.e2e.note += f", paced at {o.throughput_rate:,} msg/s in total"
            self.e2e.target = "-"  # the target is for publishers at full speed
        self.pub.note = f"publisher fsync={o.publisher_fsync}"
        self.elections.note = "from the start of publishing to the end (0: one leader)"
        self.merge.note = f"{2 * o.messages:,} messages, first merge -> merged on 3 nodes"
        self.failover.note = f"median of {o.kills} kills per run, under {o.failover_rate:,} msg/s"
        self.elected.note = self.failover.note
        self.restart.note = "restart -> merged what the leader had committed"
        for r in (self.p50, self.p99, self.worst):
            r.note = f"{o.latency_seconds:g} s per run, what is due published every 1 ms"
        for r in (self.cpu_nodes, self.cpu_clients, self.cpu_apps):
            r.note = f"during the latency run; clients {o.clients}"
        for r in self.stage_results():
            r.note = "a follower process on each stage at once, published every 1 ms"

    def measured(self) -> list[Result]:
        """The results of the chosen measurements, in the report's order; a note says how
        many runs of each stalled or failed."""
        measured_by = [
            (self.e2e, "throughput"),
            (self.pub, "throughput"),
            (self.elections, "throughput"),
            (self.merge, "merge"),
            (self.failover, "failover"),
            (self.elected, "failover"),
            (self.restart, "failover"),
            (self.p50, "latency"),
            (self.p99, "latency"),
            (self.worst, "latency"),
            (self.cpu_nodes, "latency"),
            (self.cpu_clients, "latency"),
            (self.cpu_apps, "latency"),
            *((r, "stages") for r in self.stage_results()),
            *((r, "trace") for r in self.traces.results()),
        ]
        results = []
        for r, name in measured_by:
            if name not in self.opts.measure:
                continue
            failed = self.attempts.get(name, 0) - len(r.values)
            if failed:
                r.note += f"; {failed} of {self.attempts[name]} runs stalled or failed"
            results.append(r)
        return results


# -- the verdict -----------------------------------------------------------------------


_TARGET = re.compile(r"^(<=|>=)\s*([\d,.]+)")


def verdicts(results: list[Result]) -> str:
    """One line per result with a numeric target: its median and whether it meets it."""
    lines = []
    for r in results:
        target = r.target.replace("flat (", "").rstrip(")")
        m = _TARGET.match(target)
        if m is None:
            continue
        if not r.values:
            lines.append(f"- {r.name}: **not measured** (every run stalled or failed)")
            continue
        bound = float(m.group(2).replace(",", ""))
        met = r.median <= bound if m.group(1) == "<=" else r.median >= bound
        shown = f"{r.median:,.0f}" if r.median >= 100 else f"{r.median:,.2f}"
        lines.append(
            f"- {r.name}: {shown} {r.unit}, target {r.target}: **{'met' if met else 'not met'}**"
        )
    return "\n".join(lines)
