"""``rt bench``: measure the appliance on this machine; results go to docs/BENCHMARKS.md."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click

from rt_lab.bench.cluster.harness import MEASUREMENTS, ClusterBenchOptions, describe_config
from rt_lab.bench.cluster.suite import run_cluster_bench, verdicts
from rt_lab.bench.log_bench import run_log_bench
from rt_lab.bench.replicate_bench import run_replicate_bench
from rt_lab.bench.report import markdown_table, write_section
from rt_lab.bench.stats import Result, filesystem_of, machine_description
from rt_lab.cli.bench_peers_cmd import peers_bench

Command = Callable[..., None]


@click.group()
def bench() -> None:
    """Benchmarks. Each figure is the median of several runs; see docs/BENCHMARKS.md."""


bench.add_command(peers_bench)


def _common(suite: str, default_runs: int, memory_gb: bool = True) -> Callable[[Command], Command]:
    """The options every benchmark takes: runs, memory (unless ``memory_gb`` is false),
    workdir, output, json."""

    def decorate(command: Command) -> Command:
        options = [
            click.option(
                "--runs",
                type=click.IntRange(1, 50),
                default=default_runs,
                show_default=True,
                help="Runs per figure.",
            ),
            click.option(
                "--memory-gb",
                type=click.FloatRange(0),
                default=5.0,
                show_default=True,
                help="GB moved while sampling memory (0 skips it).",
            ),
            click.option(
                "--workdir",
                type=click.Path(file_okay=False, path_type=Path),
                default=Path("/tmp"),
                show_default=True,
                help="Where the benchmark's temporary directories go.",
            ),
            click.option(
                "--output",
                type=click.Path(dir_okay=False, path_type=Path),
                default=None,
                help=f"Markdown file whose 'rt bench {suite}' section is replaced with "
                "the results.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print results as JSON."),
        ]
        if not memory_gb:
            del options[1]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _progress(suite: str) -> Callable[[str], None]:
    return lambda message: click.echo(f"rt bench {suite}: {message}", err=True)


def _report(
    suite: str,
    results: list[Result],
    workdir: Path,
    output: Path | None,
    as_json: bool,
    notes: str = "",
    machine_extra: str = "",
) -> None:
    """Print the results, and write them with the command and machine into ``output``;
    ``notes``: what the run found beyond the table (verdicts, stalls), also written."""
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        click.echo(markdown_table(results))
    if output is not None:
        command = f"rt bench {suite} " + shlex.join(sys.argv[3:])
        machine = f"{machine_description()}; files on {filesystem_of(str(workdir))}"
        machine += machine_extra
        write_section(output, suite, command.strip(), machine, results, notes)


@bench.command("log")
@_common("log", default_runs=5)
@click.option(
    "--messages",
    type=click.IntRange(1000),
    default=2_000_000,
    show_default=True,
    help="Messages per throughput run.",
)
@click.option("--payload-bytes", type=click.IntRange(0, 1 << 20), default=100, show_default=True)
def log_bench(
    runs: int,
    memory_gb: float,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    messages: int,
    payload_bytes: int,
) -> None:
    """Publisher, subscriber and scan throughput, and memory over many GB.

    Measures batch and single-call publish (fsync=never), batch publish with
    fsync=batch, batch subscribe, `rt log verify` and writer-start recovery
    scans, then publisher and subscriber memory while moving --memory-gb.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    results = run_log_bench(
        workdir, payload_bytes, messages, runs, int(memory_gb * 1e9), _progress("log")
    )
    _report("log", results, workdir, output, as_json, f"Payloads of {payload_bytes} bytes.")


@bench.command("replicate")
@_common("replicate", default_runs=3)
@click.option(
    "--fsync",
    type=click.Choice(["always", "batch", "never"]),
    default="batch",
    show_default=True,
    help="The push servers' replication.fsync.",
)
@click.option(
    "--backlog-gib",
    type=click.FloatRange(0.01, 64),
    default=1.0,
    show_default=True,
    help="Backlog per node for the catch-up and throughput runs, in GiB.",
)
@click.option(
    "--large-records",
    type=click.IntRange(0, 64),
    default=4,
    show_default=True,
    help="Records of 64 MiB (the largest payload) moved through push, merge and pull to a "
    "subscriber while each daemon's RSS is sampled (0 skips it).",
)
def replicate_bench(
    runs: int,
    memory_gb: float,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    fsync: str,
    backlog_gib: float,
    large_records: int,
) -> None:
    """Push replication: throughput and catch-up to 3 nodes, latency, memory.

    Starts 3 push servers on 127.0.0.1-3 and a push client with real mutual TLS.
    Latency: publish at 5,000 msg/s for 10 s; a follower on one node's replica
    measures publish-to-replica time. Catch-up: time for every node to hold a
    backlog written beforehand (the aggregate throughput is 3 x backlog / time).
    Memory: daemon RSS while --memory-gb is moved to every node, and while
    --large-records records of 64 MiB cross a whole 3-node stream (push client, push
    servers, pull server, pull client), each sent in frames of at most 4 MiB.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    results = run_replicate_bench(
        workdir,
        runs,
        int(backlog_gib * 2**30),
        int(memory_gb * 1e9),
        _progress("replicate"),
        fsync,
        large_records,
    )
    _report("replicate", results, workdir, output, as_json)


@bench.command("cluster")
@_common("cluster", default_runs=3, memory_gb=False)
@click.option(
    "--measure",
    "measure",
    type=click.Choice(MEASUREMENTS),
    multiple=True,
    help="What to measure (repeatable)  [default: all of them]",
)
@click.option(
    "--messages",
    type=click.IntRange(1000),
    default=2_000_000,
    show_default=True,
    help="Messages per publisher for the throughput and merge runs.",
)
@click.option(
    "--throughput-rate",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Total msg/s of the throughput runs (0: as fast as the publishers can; the "
    "500,000 msg/s target is for that).",
)
@click.option(
    "--kills",
    type=click.IntRange(1, 50),
    default=5,
    show_default=True,
    help="Leader kills per failover run.",
)
@click.option(
    "--failover-rate",
    type=click.IntRange(2),
    default=20_000,
    show_default=True,
    help="Total msg/s published while leaders are killed.",
)
@click.option(
    "--latency-rate",
    type=click.IntRange(2),
    default=5_000,
    show_default=True,
    help="Total msg/s of the latency and stages runs, and of the trace's busy run.",
)
@click.option(
    "--idle-rate",
    type=click.IntRange(2),
    default=20,
    show_default=True,
    help="Total msg/s of the trace's idle run.",
)
@click.option(
    "--latency-seconds",
    type=click.FloatRange(0.5, 600),
    default=10.0,
    show_default=True,
    help="Length of each latency, stages and trace run.",
)
@click.option(
    "--memory-messages",
    type=click.IntRange(0),
    default=10_000_000,
    show_default=True,
    help="Messages in total while sequencer memory is sampled (0 skips it).",
)
@click.option(
    "--memory-rate",
    type=click.IntRange(0),
    default=50_000,
    show_default=True,
    help="Total msg/s of the memory run (0: as fast as the publishers can).",
)
@click.option(
    "--publisher-fsync",
    type=click.Choice(["always", "batch", "interval", "never"]),
    default="never",
    show_default=True,
    help="The publishing applications' fsync.",
)
@click.option(
    "--publisher-roll-mib",
    type=click.IntRange(1, 1024),
    default=1024,
    show_default=True,
    help="The publishing applications' roll_bytes, in MiB.",
)
@click.option(
    "--max-range-kib",
    type=click.IntRange(4, 256 << 10),
    default=None,
    help="sequencer.max_range_bytes in KiB  [default: the configuration default, 1 MiB]",
)
@click.option(
    "--replication-fsync",
    type=click.Choice(["always", "never"]),
    default=None,
    help="replication.fsync of the stream's daemons (push servers, the sequencers' "
    "inputs, the pull client); `never` runs without those syncs, for comparison with "
    "systems that do not sync. The durability of each run (publisher fsync, "
    "replication.fsync, the raft journal, always synced) is stated in its report  "
    "[default: the configuration default, batch]",
)
@click.option(
    "--nice",
    type=click.IntRange(0, 19),
    default=0,
    show_default=True,
    help="Niceness of the publishing and subscribing applications.",
)
@click.option(
    "--stall-seconds",
    type=click.FloatRange(5),
    default=30.0,
    show_default=True,
    help="A run with no progress for this long has stalled; it is reported and skipped.",
)
@click.option(
    "--restart-seconds",
    type=click.FloatRange(5),
    default=30.0,
    show_default=True,
    help="How long a restarted sequencer may take to be back in step before the "
    "remaining kills go on in a fresh stream.",
)
def cluster_bench(
    runs: int,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    measure: tuple[str, ...],
    messages: int,
    throughput_rate: int,
    kills: int,
    failover_rate: int,
    latency_rate: int,
    latency_seconds: float,
    idle_rate: int,
    memory_messages: int,
    memory_rate: int,
    publisher_fsync: str,
    publisher_roll_mib: int,
    max_range_kib: int | None,
    replication_fsync: str | None,
    nice: int,
    stall_seconds: float,
    restart_seconds: float,
) -> None:
    """A 3-node stream end to end: throughput, merge rate, failover, latency, memory.

    Starts a whole stream of real daemons with mutual TLS on this machine (per node
    on 127.0.0.1-3: rt push-server, rt sequencer, rt pull-server; rt push-client on
    publisher hosts pub-1 and pub-2; rt pull-client on subscriber host sub-1), a
    fresh one per run. The publishing applications (one per publisher host) and the
    subscribing application (Subscriber following sub-1's copy of the merged log)
    are processes of their own. 100-byte payloads.

    \b
    throughput  both publishers publish --messages in batches of 1,000 at full
                speed; first publish -> the subscriber has read them all
    merge       the sequencers alone: input already on every node, a leader
                elected -> every node's merged log holds it all
    failover    SIGKILL the leader's sequencer --kills times under --failover-rate;
                kill -> another leader has committed and merged past the kill
    latency     --latency-rate in total, what is due published every 1 ms;
                record timestamp -> the subscriber reads it (p50, p99, max)
    stages      the same traffic, timed at each stage at once by a follower
                process: a follower node's in/, the leader's merged log, a
                follower's merged log, the subscriber's copy (p50, p99)
    trace       the same traffic with every daemon tracing (RT_TRACE_DIR), at
                --idle-rate and at --latency-rate: per step of a message's path
                (sent, in a majority's in/, synced, reported, planned, proposed,
                the raft journals, committed, applied, merged, pulled, copied,
                delivered) the time since publish (p50, p99); each daemon role's
                CPU, as a share of one core, during the traffic and during 10 s
                with no traffic before it
    memory      RSS of every rt sequencer while --memory-messages pass (once)

    A run that makes no progress for --stall-seconds is reported with the nodes'
    status and the end of the sequencers' logs, kept under --workdir, and left out
    of the medians.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    opts = ClusterBenchOptions(
        workdir=workdir,
        runs=runs,
        measure=measure or MEASUREMENTS,
        messages=messages,
        throughput_rate=throughput_rate,
        kills=kills,
        failover_rate=failover_rate,
        latency_rate=latency_rate,
        latency_seconds=latency_seconds,
        idle_rate=idle_rate,
        memory_messages=memory_messages,
        memory_rate=memory_rate,
        publisher_fsync=publisher_fsync,
        publisher_roll_bytes=publisher_roll_mib << 20,
        max_range_bytes=None if max_range_kib is None else max_range_kib << 10,
        replication_fsync=replication_fsync,
        nice=nice,
        stall_s=stall_seconds,
        restart_s=restart_seconds,
    )
    commit = _source_commit()  # now: others may change the checkout while it runs
    report = run_cluster_bench(opts, _progress("cluster"))
    for problem in report.problems:
        click.echo(f"rt bench cluster: {problem}", err=True)
    notes = "Targets:\n\n" + verdicts(report.results) + "\n"
    if report.problems:
        notes += "\nStalls and failures in this measurement (what, then every node's status):\n\n"
        notes += "\n".join(_problem_lines(p) for p in report.problems) + "\n"
    loads = report.loads or [0.0]
    machine = (
        f"; 1-minute load average {min(loads):.1f}-{max(loads):.1f} as the runs started"
        f"{commit}; stream settings: {describe_config(opts)}"
    )
    measured = [r for r in report.results if r.values]
    _report("cluster", measured, workdir, output, as_json, notes, machine)
    if report.problems:
        raise SystemExit(1)


@bench.command("spark")
@_common("spark", default_runs=3, memory_gb=False)
@click.option(
    "--rows",
    type=click.IntRange(1000),
    default=2_000_000,
    show_default=True,
    help="Messages in the batch read (100-byte payloads).",
)
@click.option(
    "--lag-seconds",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="How long messages are published while the streaming lag is measured (0 skips it).",
)
@click.option(
    "--rate",
    type=click.IntRange(1),
    default=5_000,
    show_default=True,
    help="msg/s published while the streaming lag is measured.",
)
@click.option(
    "--memory-rows",
    type=click.IntRange(0),
    default=10_000_000,
    show_default=True,
    help="Messages the streaming query reads while its memory is sampled (0 skips it).",
)
@click.option(
    "--memory-rate",
    type=click.IntRange(0),
    default=50_000,
    show_default=True,
    help="msg/s published while memory is sampled (0: all published before the query starts).",
)
@click.option(
    "--memory-bound-mb",
    type=click.FloatRange(0),
    default=64.0,
    show_default=True,
    help="Most RSS growth, in MB, that still counts as flat.",
)
def spark_bench(
    runs: int,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    rows: int,
    lag_seconds: float,
    rate: int,
    memory_rows: int,
    memory_rate: int,
    memory_bound_mb: float,
) -> None:
    """The rt Spark data source in a local[2] session: batch read, streaming lag, memory.

    \b
    batch read  a publisher log of --rows messages read with
                spark.read.format("rt") into the noop sink, side by side with
                the same rows in Parquet read by Spark's reader; also timed on
                their own: planning on the driver, the slice reader without
                Spark, and a Python source handing over pre-built Arrow batches
    lag         --rate msg/s for --lag-seconds while a streaming query writes
                Parquet (trigger 1 s); publish -> micro-batch committed (p50,
                p99), and every published id in the sink exactly once
    memory      RSS of the driver's JVM and the Python workers, every second,
                while a streaming query reads --memory-rows published at
                --memory-rate (a Spark session of its own)

    Needs Java 17 and the spark extra.
    """
    from rt_appliance.spark.java import find_java
    from rt_lab.bench.spark_bench import SparkBenchOptions, run_spark_bench

    find_java()
    workdir.mkdir(parents=True, exist_ok=True)
    opts = SparkBenchOptions(
        workdir=workdir,
        rows=rows,
        runs=runs,
        lag_seconds=lag_seconds,
        rate=rate,
        memory_rows=memory_rows,
        memory_rate=memory_rate,
        memory_bound_mb=memory_bound_mb,
    )
    commit = _source_commit()
    report = run_spark_bench(opts, _progress("spark"))
    for problem in report.problems:
        click.echo(f"rt bench spark: {problem}", err=True)
    notes = "Targets:\n\n" + "\n".join(report.verdicts)
    loads = report.loads or [0.0]
    machine = (
        f"; 1-minute load average {min(loads):.1f}-{max(loads):.1f} during the runs"
        f"{commit}; {report.versions}"
    )
    _report("spark", report.results, workdir, output, as_json, notes, machine)
    if report.problems:
        raise SystemExit(1)


@bench.command("floor")
@_common("floor", default_runs=3, memory_gb=False)
@click.option(
    "--seconds",
    type=click.FloatRange(0.5, 600),
    default=5.0,
    show_default=True,
    help="Length of each step's run at each rate.",
)
@click.option(
    "--idle-rate",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    help="Steps per second of the idle runs.",
)
def floor_bench(
    runs: int, workdir: Path, output: Path | None, as_json: bool, seconds: float, idle_rate: int
) -> None:
    """The least each kind of step on a message's path costs here, and the floors they set.

    \b
    tls      a 100-byte frame between two Python processes over mutual TLS 1.3
             on asyncio (half a round trip; CPU of both processes)
    inotify  a process waiting on an inotify watch wakes when another one
             appends 100 bytes, and reads them
    sync     fdatasync of a 100-byte append on --workdir's disk
    thread   an asyncio loop hands a call to a worker thread and gets it back

    Each at --idle-rate and at 1,000 per second (one per millisecond, the
    publishing tick of the latency runs): latency p50 and p99, CPU per step.
    Then two floors for a 3-node stream on this machine: the idle latency (the
    steps one after another on a message's path, at their p50) and the
    daemons' CPU at one publishing tick per millisecond (every step a tick
    causes in every daemon). See docs/BENCHMARKS.md for the counts.
    """
    from rt_lab.bench.floor import run_floor_bench

    workdir.mkdir(parents=True, exist_ok=True)
    found = run_floor_bench(workdir, runs, seconds, idle_rate, 1000, _progress("floor"))
    _report("floor", found.results(), workdir, output, as_json, "", _source_commit())


def _problem_lines(problem: str) -> str:
    """A problem for the report: its first line and the nodes' status, not the log lines."""
    lines = problem.strip().splitlines()
    shown = [line for line in lines[1:] if line.startswith(("status: ", "merged log bytes: "))]
    return f"- {lines[0]}" + "".join(f"  \n  {line}" for line in shown)


_SOURCES = ("rt_appliance", "lab")  # the code a figure depends on


def _source_commit() -> str:
    """ "; code at commit X" when the package runs from a git checkout, else ""."""
    root = str(Path(__file__).resolve().parents[3])
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", *_SOURCES],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"; code at commit {commit}" + (" with local changes" if changed else "")
