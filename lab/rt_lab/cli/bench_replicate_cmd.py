"""``rt bench replicate``: push replication to 3 nodes with real mutual TLS."""

from __future__ import annotations

from pathlib import Path

import click

from rt_lab.bench.replicate_bench import run_replicate_bench
from rt_lab.cli.bench_report import report
from rt_lab.cli.options import bench_options, option, progress

__all__ = ["replicate_bench"]


@click.command("replicate")
@bench_options("replicate", default_runs=3)
@option(
    "--fsync",
    click.Choice(["always", "batch", "never"]),
    "batch",
    "The push servers' replication.fsync.",
)
@option(
    "--backlog-gib",
    click.FloatRange(0.01, 64),
    1.0,
    "Backlog per node for the catch-up and throughput runs, in GiB.",
)
@option(
    "--large-records",
    click.IntRange(0, 64),
    4,
    "Records of 64 MiB (the largest payload) moved through push, merge and pull to a "
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
        progress("rt bench replicate"),
        fsync,
        large_records,
    )
    report("replicate", results, workdir, output, as_json)
