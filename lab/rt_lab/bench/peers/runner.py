"""``rt bench peers``: every row's runs, one row after another, and their medians.

A peer's servers start once per row and stop when its runs are done; each run is a
throughput phase and a latency phase on a freshly created stream. Our stream's runs
are ``rt bench cluster`` subprocesses (:mod:`.ours`). A run counts only if every check
passed; the medians are over the runs that did.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rt_lab.bench.peers import nats_peer, ours, rabbitmq_peer, redis_peer
from rt_lab.bench.peers.workload import Running, run_phase
from rt_lab.bench.stats import percentile

__all__ = [
    "ROWS",
    "SYSTEMS",
    "PeersOptions",
    "PeersReport",
    "Row",
    "RowResult",
    "RunOutcome",
    "latency_summary_ms",
    "run_peers_bench",
]

Progress = Callable[[str], None]
SYSTEMS = ("nats", "rabbitmq", "redis", "rt")  # what --only chooses from
NO_REPLICATION_FSYNC = ["--replication-fsync", "never"]


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a system in one configuration."""

    key: str
    system: str  # one of SYSTEMS
    label: str
    durability: str


ROWS = (
    Row("rt", "rt", "rt-appliance, 3 nodes (durable default)",
        "publisher fsync never; replicas synced before they acknowledge (replication fsync "
        "batch); raft journal synced"),
    Row("rt-replication-fsync-never", "rt", "rt-appliance, 3 nodes, replication fsync never",
        "publisher fsync never; replication fsync never (push servers, sequencer inputs and "
        "the pull client do not sync); raft journal synced"),
    Row("nats", "nats", "NATS JetStream R3, 3 nodes, file storage",
        "acknowledged once 2 of 3 nodes stored it; files synced every 2 min (default "
        "sync_interval)"),
    Row("rabbitmq", "rabbitmq", "RabbitMQ stream, 1 node",
        "never synced (streams rely on replication; this is one node)"),
    Row("redis-always", "redis", "Redis Streams, AOF appendfsync always",
        "appendfsync always: synced before the reply"),
    Row("redis-everysec", "redis", "Redis Streams, AOF appendfsync everysec",
        "appendfsync everysec: up to 1 s of acknowledged writes can be lost"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PeersOptions:
    workdir: Path
    runs: int = 3
    only: tuple[str, ...] = SYSTEMS
    messages: int = 200_000
    latency_rate: int = 5_000
    latency_seconds: float = 10.0


@dataclass(slots=True)
class RunOutcome:
    """One run of one row: a throughput phase and a latency phase."""

    ok: bool
    reason: str = ""
    throughput: float = 0.0  # msg/s end to end
    acked: float = 0.0  # msg/s until every publish was acknowledged (peers only)
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "throughput_msg_s": self.throughput,
            "publish_acked_msg_s": self.acked or None,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
        }


@dataclass(slots=True)
class RowResult:
    row: Row
    version: str = ""
    runs: list[RunOutcome] = field(default_factory=list)
    samples_ns: list[int] = field(default_factory=list)  # every latency of the runs that passed
    skipped: str = ""  # why the row was not run

    @property
    def passed(self) -> list[RunOutcome]:
        return [r for r in self.runs if r.ok]

    def median(self, attribute: str) -> float | None:
        values = [float(getattr(r, attribute)) for r in self.passed]
        return statistics.median(values) if values else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "row": self.row.key,
            "label": self.row.label,
            "version": self.version,
            "durability": self.row.durability,
            "skipped": self.skipped or None,
            "runs_ok": len(self.passed),
            "runs": [r.as_dict() for r in self.runs],
            "median": {
                name: self.median(attribute)
                for name, attribute in (
                    ("throughput_msg_s", "throughput"),
                    ("p50_ms", "p50_ms"),
                    ("p99_ms", "p99_ms"),
                    ("max_ms", "max_ms"),
                )
            },
            "latency_samples": len(self.samples_ns),
        }


@dataclass(slots=True)
class PeersReport:
    rows: list[RowResult]
    loads: list[float] = field(default_factory=list)  # 1-minute load average at each run
    kept: Path | None = None  # the work directory, kept because a run failed


def run_peers_bench(opts: PeersOptions, progress: Progress) -> PeersReport:
    """Every chosen row, ``opts.runs`` runs each."""
    work = Path(tempfile.mkdtemp(prefix="rt-bench-peers-", dir=opts.workdir))
    report = PeersReport([])
    # Ctrl-C must end the bench wherever it lands. asyncio.run would turn it into a
    # cancellation, which a client may report as an ordinary error (nats-py does) and
    # the run would merely fail; a handler of our own keeps asyncio's off.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _interrupt) if main else None
    try:
        for row in ROWS:
            if row.system not in opts.only:
                continue
            result = RowResult(row)
            report.rows.append(result)
            if row.system == "rt":
                _our_row(opts, result, work / row.key, progress, report.loads)
            else:
                _peer_row(opts, result, work / row.key, progress, report.loads)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        if all(len(r.passed) == len(r.runs) for r in report.rows):
            shutil.rmtree(work, ignore_errors=True)
        else:
            report.kept = work
    return report


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _starter(row: Row) -> Callable[[Path], contextlib.AbstractContextManager[Running]]:
    if row.key == "nats":
        return nats_peer.running
    if row.key == "rabbitmq":
        return rabbitmq_peer.running
    fsync = row.key.removeprefix("redis-")
    return lambda work: redis_peer.running(work, fsync)


def _peer_row(
    opts: PeersOptions, result: RowResult, work: Path, progress: Progress, loads: list[float]
) -> None:
    name = result.row.key
    progress(f"{name}: starting its servers in {work}")
    try:
        with _starter(result.row)(work) as peer:
            result.version = peer.version
            for run in range(opts.runs):
                loads.append(os.getloadavg()[0])
                progress(f"{name}: run {run + 1}/{opts.runs} (load average {loads[-1]:.1f})")
                outcome = _peer_run(opts, peer, result)
                progress(f"{name}:   {_describe(outcome)}")
                result.runs.append(outcome)
    except Exception as exc:  # the servers would not start or stop: the row's runs failed
        reason = f"{type(exc).__name__}: {exc}"
        progress(f"{name}: {reason}")
        missing = opts.runs - len(result.runs)
        result.runs.extend(RunOutcome(False, reason) for _ in range(missing))


def _peer_run(opts: PeersOptions, peer: Running, result: RowResult) -> RunOutcome:
    try:
        tput = run_phase(peer, count=opts.messages)
        if not tput.ok:
            return RunOutcome(False, f"throughput: {tput.reason}")
        lat = run_phase(peer, rate=opts.latency_rate, seconds=opts.latency_seconds)
        if not lat.ok:
            return RunOutcome(False, f"latency: {lat.reason}")
    except Exception as exc:
        return RunOutcome(False, f"{type(exc).__name__}: {exc}")
    result.samples_ns.extend(lat.latencies_ns)
    p50, p99, worst = latency_summary_ms(lat.latencies_ns)
    return RunOutcome(True, "", tput.throughput, tput.acked, p50, p99, worst)


def latency_summary_ms(samples_ns: list[int]) -> tuple[float, float, float]:
    """p50, p99 and max of ``samples_ns``, in ms."""
    p50, p99, worst = (percentile(samples_ns, p) / 1e6 for p in (50, 99, 100))
    return p50, p99, worst


def _our_row(
    opts: PeersOptions, result: RowResult, work: Path, progress: Progress, loads: list[float]
) -> None:
    name = result.row.key
    extra: list[str] = []
    if result.row.key == "rt-replication-fsync-never":
        if not ours.has_option(NO_REPLICATION_FSYNC[0]):
            result.skipped = (
                "this version of rt bench cluster has no --replication-fsync option, so the "
                "stream cannot be run with replication fsync never"
            )
            progress(f"{name}: skipped: {result.skipped}")
            return
        extra = NO_REPLICATION_FSYNC
    result.version = "rt-appliance " + _our_version()
    for run in range(opts.runs):
        loads.append(os.getloadavg()[0])
        progress(f"{name}: run {run + 1}/{opts.runs} (load average {loads[-1]:.1f})")
        got = ours.run_ours(opts.messages, opts.latency_rate, opts.latency_seconds,
                            work / f"run-{run + 1}", extra, progress)  # fmt: skip
        outcome = RunOutcome(got.ok, got.reason, got.throughput, 0.0, got.p50_ms, got.p99_ms,
                             got.max_ms)  # fmt: skip
        progress(f"{name}:   {_describe(outcome)}")
        result.runs.append(outcome)


def _our_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version("rt-appliance")
    return "?"


def _describe(outcome: RunOutcome) -> str:
    if not outcome.ok:
        return f"FAILED: {outcome.reason}"
    return (
        f"{outcome.throughput:,.0f} msg/s end to end; latency p50 {outcome.p50_ms:.2f} ms, "
        f"p99 {outcome.p99_ms:.2f} ms, max {outcome.max_ms:.1f} ms"
    )
