"""``rt bench log``: one machine's publisher, subscriber and scans, without the network."""

from __future__ import annotations

from pathlib import Path

import click

from rt_lab.bench.log_bench import run_log_bench
from rt_lab.cli.bench_report import report
from rt_lab.cli.options import bench_options, option, progress

__all__ = ["log_bench"]


@click.command("log")
@bench_options("log", default_runs=5)
@option("--messages", click.IntRange(1000), 2_000_000, "Messages per throughput run.")
@option("--payload-bytes", click.IntRange(0, 1 << 20), 100)
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
        workdir, payload_bytes, messages, runs, int(memory_gb * 1e9), progress("rt bench log")
    )
    report("log", results, workdir, output, as_json, f"Payloads of {payload_bytes} bytes.")
