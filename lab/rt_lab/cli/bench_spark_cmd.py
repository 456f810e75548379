"""``rt bench spark``: the rt Spark data source in a local Spark session."""

from __future__ import annotations

from pathlib import Path

import click

from rt_lab.cli.bench_report import load_range, report, source_commit
from rt_lab.cli.options import bench_options, option, progress, seconds_option

__all__ = ["spark_bench"]


@click.command("spark")
@bench_options("spark", default_runs=3, memory_gb=False)
@option(
    "--rows", click.IntRange(1000), 2_000_000, "Messages in the batch read (100-byte payloads)."
)
@option(
    "--cluster-workers",
    click.IntRange(0, 16),
    3,
    "Workers (1 core each) of a standalone Spark cluster on 127.0.0.1 that the batch read "
    "also runs on (0 skips it).",
)
@seconds_option(
    "--lag-seconds",
    30.0,
    "How long messages are published while the streaming lag is measured (0 skips it).",
    least=0,
    most=None,
)
@option("--rate", click.IntRange(1), 5_000, "msg/s published while the streaming lag is measured.")
@option(
    "--memory-rows",
    click.IntRange(0),
    10_000_000,
    "Messages the streaming query reads while its memory is sampled (0 skips it).",
)
@option(
    "--memory-rate",
    click.IntRange(0),
    50_000,
    "msg/s published while memory is sampled (0: all published before the query starts).",
)
@option(
    "--memory-bound-mb",
    click.FloatRange(0),
    64.0,
    "Most RSS growth, in MB, that still counts as flat.",
)
def spark_bench(
    runs: int,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    rows: int,
    cluster_workers: int,
    lag_seconds: float,
    rate: int,
    memory_rows: int,
    memory_rate: int,
    memory_bound_mb: float,
) -> None:
    """The rt Spark data source, local[2] and a local cluster: batch read, lag, memory.

    \b
    batch read  a publisher log of --rows messages read with
                spark.read.format("rt") into the noop sink, side by side with
                the same rows in Parquet read by Spark's reader; also timed on
                their own: planning on the driver, the slice reader without
                Spark, and a Python source handing over pre-built Arrow batches
    cluster     the same read of the same log, run by run, through a
                standalone master and --cluster-workers workers on
                127.0.0.1, secured as the stream's cluster (a new Spark
                secret); rows/s and its ratio to the local read
    lag         --rate msg/s for --lag-seconds while a streaming query writes
                Parquet (trigger 1 s); publish -> micro-batch committed (p50,
                p99), and every published id in the sink exactly once
    memory      RSS of the driver's JVM and the Python workers, every second,
                while a streaming query reads --memory-rows published at
                --memory-rate (a Spark session of its own)

    Needs Java 17 and the spark extra.
    """
    # Imported here: pyspark and Java are needed only when this suite runs.
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
        cluster_workers=cluster_workers,
    )
    commit = source_commit()
    say = progress("rt bench spark")
    found = run_spark_bench(opts, say)
    for problem in found.problems:
        say(problem)
    notes = "Targets:\n\n" + "\n".join(found.verdicts)
    machine = f"; {load_range(found.loads)} during the runs{commit}; {found.versions}"
    report("spark", found.results, workdir, output, as_json, notes, machine)
    if found.problems:
        raise SystemExit(1)
