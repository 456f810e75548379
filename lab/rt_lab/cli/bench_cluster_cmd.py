"""``rt bench cluster``: a whole 3-node stream of real daemons, measured end to end."""

from __future__ import annotations

from pathlib import Path

import click

from rt_lab.bench.cluster.harness import MEASUREMENTS, ClusterBenchOptions, describe_config
from rt_lab.bench.cluster.suite import run_cluster_bench, verdicts
from rt_lab.cli.bench_report import load_range, report, source_commit
from rt_lab.cli.options import bench_options, option, progress, seconds_option

__all__ = ["cluster_bench"]


@click.command("cluster")
@bench_options("cluster", default_runs=3, memory_gb=False)
@click.option(
    "--measure",
    "measure",
    type=click.Choice(MEASUREMENTS),
    multiple=True,
    help="What to measure (repeatable)  [default: all of them]",
)
@option(
    "--messages",
    click.IntRange(1000),
    2_000_000,
    "Messages per publisher for the throughput and merge runs.",
)
@option(
    "--throughput-rate",
    click.IntRange(0),
    0,
    "Total msg/s of the throughput runs (0: as fast as the publishers can; the "
    "500,000 msg/s target is for that).",
)
@option("--kills", click.IntRange(1, 50), 5, "Leader kills per failover run.")
@option(
    "--failover-rate", click.IntRange(2), 20_000, "Total msg/s published while leaders are killed."
)
@option(
    "--latency-rate",
    click.IntRange(2),
    5_000,
    "Total msg/s of the latency and stages runs, and of the trace's busy run.",
)
@option("--idle-rate", click.IntRange(2), 20, "Total msg/s of the trace's idle run.")
@seconds_option(
    "--quiet-seconds", 10.0, "How long the trace measures the nodes' CPU with no traffic."
)
@seconds_option("--latency-seconds", 10.0, "Length of each latency, stages and trace run.")
@option(
    "--memory-messages",
    click.IntRange(0),
    10_000_000,
    "Messages in total while sequencer memory is sampled (0 skips it).",
)
@option(
    "--memory-rate",
    click.IntRange(0),
    50_000,
    "Total msg/s of the memory run (0: as fast as the publishers can).",
)
@option(
    "--publisher-fsync",
    click.Choice(["always", "batch", "interval", "never"]),
    "never",
    "The publishing applications' fsync.",
)
@option(
    "--publisher-roll-mib",
    click.IntRange(1, 1024),
    1024,
    "The publishing applications' roll_bytes, in MiB.",
)
@option(
    "--max-range-kib",
    click.IntRange(4, 256 << 10),
    None,
    "sequencer.max_range_bytes in KiB  [default: the configuration default, 1 MiB]",
)
@option(
    "--replication-fsync",
    click.Choice(["always", "never"]),
    None,
    "replication.fsync of the stream's daemons (push servers, the sequencers' "
    "inputs, the pull client); `never` runs without those syncs, for comparison with "
    "systems that do not sync. The durability of each run (publisher fsync, "
    "replication.fsync, the raft journal, always synced) is stated in its report  "
    "[default: the configuration default, batch]",
)
@option(
    "--nice", click.IntRange(0, 19), 0, "Niceness of the publishing and subscribing applications."
)
@option(
    "--clients",
    click.Choice(["in-process", "daemons"]),
    "in-process",
    "How the applications reach the nodes: `in-process`, as a Python application "
    "does by default (Publisher(replicate=...), Subscriber(pull=...)), or `daemons` "
    "(rt push-client on each publisher host, rt pull-client on the subscriber host)",
)
@option(
    "--latency-samples",
    click.Path(dir_okay=False, writable=True, path_type=Path),
    None,
    "Append every message's latency of the latency runs to this file (int64 ns, this "
    "machine's byte order), for a CDF (rt bench peers plots ours from it).",
)
@seconds_option(
    "--stall-seconds",
    30.0,
    "A run with no progress for this long has stalled; it is reported and skipped.",
    least=5,
    most=None,
)
@seconds_option(
    "--restart-seconds",
    30.0,
    "How long a restarted sequencer may take to be back in step before the "
    "remaining kills go on in a fresh stream.",
    least=5,
    most=None,
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
    quiet_seconds: float,
    memory_messages: int,
    memory_rate: int,
    publisher_fsync: str,
    publisher_roll_mib: int,
    max_range_kib: int | None,
    replication_fsync: str | None,
    nice: int,
    clients: str,
    latency_samples: Path | None,
    stall_seconds: float,
    restart_seconds: float,
) -> None:
    """A 3-node stream end to end: throughput, merge rate, failover, latency, memory.

    Starts a whole stream of real processes with mutual TLS on this machine (per
    node on 127.0.0.1-3: rt node), a fresh one per run. The publishing applications
    (one per publisher host, pub-1 and pub-2) and the subscribing application
    (following sub-1's copy of the merged log) are processes of their own; by
    default they replicate and pull themselves (--clients). 100-byte payloads.

    \b
    throughput  both publishers publish --messages in batches of 1,000 at full
                speed; first publish -> the subscriber has read them all
    merge       the sequencers alone: input already on every node, a leader
                elected -> every node's merged log holds it all
    failover    SIGKILL the leader's node --kills times under --failover-rate;
                kill -> another leader has committed and merged past the kill
    latency     --latency-rate in total, what is due published every 1 ms;
                record timestamp -> the subscriber reads it (p50, p99, max)
    stages      the same traffic, timed at each stage at once by a follower
                process: a follower node's in/, the leader's merged log, a
                follower's merged log, the subscriber's copy (p50, p99)
    trace       the same traffic with every process tracing (RT_TRACE_DIR), at
                --idle-rate and at --latency-rate: per step of a message's path
                (sent, in a majority's in/, synced, reported, planned, proposed,
                the raft journals, committed, applied, merged, pulled, copied,
                delivered) the time since publish (p50, p99); the nodes' CPU
                (and the client daemons' with --clients daemons) and the
                applications', as a share of one core, during the traffic,
                and, before the run at --idle-rate, the nodes' during
                --quiet-seconds with no traffic (a stream of its own, not
                traced, from 3 s after a subscriber connected)
    memory      RSS of every rt node process while --memory-messages pass (once)

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
        quiet_s=quiet_seconds,
        memory_messages=memory_messages,
        memory_rate=memory_rate,
        publisher_fsync=publisher_fsync,
        publisher_roll_bytes=publisher_roll_mib << 20,
        max_range_bytes=None if max_range_kib is None else max_range_kib << 10,
        replication_fsync=replication_fsync,
        nice=nice,
        clients=clients,
        latency_samples=latency_samples,
        stall_s=stall_seconds,
        restart_s=restart_seconds,
    )
    commit = source_commit()  # now: others may change the checkout while it runs
    say = progress("rt bench cluster")
    found = run_cluster_bench(opts, say)
    for problem in found.problems:
        say(problem)
    notes = "Targets:\n\n" + verdicts(found.results) + "\n"
    if found.problems:
        notes += "\nStalls and failures in this measurement (what, then every node's status):\n\n"
        notes += "\n".join(_problem_lines(p) for p in found.problems) + "\n"
    machine = (
        f"; {load_range(found.loads)} as the runs started"
        f"{commit}; stream settings: {describe_config(opts)}"
    )
    measured = [r for r in found.results if r.values]
    report("cluster", measured, workdir, output, as_json, notes, machine)
    if found.problems:
        raise SystemExit(1)


def _problem_lines(problem: str) -> str:
    """A problem for the report: its first line and the nodes' status, not the log lines."""
    lines = problem.strip().splitlines()
    shown = [line for line in lines[1:] if line.startswith(("status: ", "merged log bytes: "))]
    return f"- {lines[0]}" + "".join(f"  \n  {line}" for line in shown)
