"""``rt bench peers``: every row's runs, one row after another, and their medians.

Every row names its :class:`~rt_lab.bench.peers.driver.Driver`, and every row is run
the same way through it: its system is brought up once for the row's runs and taken
down after them. A peer's servers are started here; each run is a throughput phase and
a latency phase on a freshly created stream. Our stream's runs are ``rt bench
cluster`` subprocesses (:mod:`.ours`). A run counts only if every check passed; the
medians are over the runs that did.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rt_lab.bench.peers.driver import Driver, Progress, RunOutcome, System, Workload
from rt_lab.bench.peers.nats_peer import NatsDriver
from rt_lab.bench.peers.ours import OurDriver
from rt_lab.bench.peers.rabbitmq_peer import RabbitDriver
from rt_lab.bench.peers.redis_peer import RedisDriver

__all__ = [
    "ROWS",
    "SYSTEMS",
    "PeersOptions",
    "PeersReport",
    "Row",
    "RowResult",
    "run_peers_bench",
]

SYSTEMS = ("nats", "rabbitmq", "redis", "rt")  # what --only chooses from
NO_REPLICATION_FSYNC = ["--replication-fsync", "never"]


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a system in one configuration."""

    key: str
    system: str  # one of SYSTEMS
    label: str
    durability: str
    driver: Driver = field(compare=False, repr=False)  # what runs the system so


ROWS = (
    Row("rt", "rt", "rt-appliance, 3 nodes (durable default)",
        "publisher fsync never; replicas synced before they acknowledge (replication fsync "
        "batch); raft journal synced",
        OurDriver()),
    Row("rt-replication-fsync-never", "rt", "rt-appliance, 3 nodes, replication fsync never",
        "publisher fsync never; replication fsync never (push servers, sequencer inputs and "
        "the pull client do not sync); raft journal synced",
        OurDriver(NO_REPLICATION_FSYNC, "replication fsync never")),
    Row("nats", "nats", "NATS JetStream R3, 3 nodes, file storage",
        "acknowledged once 2 of 3 nodes stored it; files synced every 2 min (default "
        "sync_interval)",
        NatsDriver()),
    Row("rabbitmq", "rabbitmq", "RabbitMQ stream, 1 node",
        "never synced (streams rely on replication; this is one node)",
        RabbitDriver()),
    Row("redis-always", "redis", "Redis Streams, AOF appendfsync always",
        "appendfsync always: synced before the reply",
        RedisDriver("always")),
    Row("redis-everysec", "redis", "Redis Streams, AOF appendfsync everysec",
        "appendfsync everysec: up to 1 s of acknowledged writes can be lost",
        RedisDriver("everysec")),
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
                    ("cpu_servers_percent", "cpu_servers"),
                    ("cpu_apps_percent", "cpu_apps"),
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
            _run_row(opts, result, work / row.key, progress, report.loads)
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


def _run_row(
    opts: PeersOptions, result: RowResult, work: Path, progress: Progress, loads: list[float]
) -> None:
    """The row's runs, on its system brought up once for them, unless it is skipped."""
    name, driver = result.row.key, result.row.driver
    result.skipped = driver.skip_reason()
    if result.skipped:
        progress(f"{name}: skipped: {result.skipped}")
        return
    if driver.starts_servers:
        progress(f"{name}: starting its servers in {work}")
    try:
        with driver.running(work) as system:
            result.version = system.version
            _runs(opts, result, system, progress, loads)
    except Exception as exc:  # the servers would not start or stop: the row's runs failed
        if not driver.starts_servers:
            raise  # no servers of the row's own to blame: the bench's error, which ends it
        reason = f"{type(exc).__name__}: {exc}"
        progress(f"{name}: {reason}")
        missing = opts.runs - len(result.runs)
        result.runs.extend(RunOutcome(False, reason) for _ in range(missing))


def _runs(
    opts: PeersOptions, result: RowResult, system: System, progress: Progress, loads: list[float]
) -> None:
    name = result.row.key
    workload = Workload(opts.messages, opts.latency_rate, opts.latency_seconds)
    for run in range(1, opts.runs + 1):
        loads.append(os.getloadavg()[0])
        progress(f"{name}: run {run}/{opts.runs} (load average {loads[-1]:.1f})")
        outcome = system.run(run, workload, progress)
        result.samples_ns.extend(outcome.samples_ns)
        progress(f"{name}:   {_describe(outcome)}")
        result.runs.append(outcome)


def _describe(outcome: RunOutcome) -> str:
    if not outcome.ok:
        return f"FAILED: {outcome.reason}"
    return (
        f"{outcome.throughput:,.0f} msg/s end to end; latency p50 {outcome.p50_ms:.2f} ms, "
        f"p99 {outcome.p99_ms:.2f} ms, max {outcome.max_ms:.1f} ms; CPU servers "
        f"{100 * outcome.cpu_servers:.0f}%, applications {100 * outcome.cpu_apps:.0f}% of a core"
    )
