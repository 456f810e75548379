"""``rt bench``: measure the appliance on this machine; results go to docs/BENCHMARKS.md.

Each suite is a command of its own module (``bench_*_cmd``); this group gathers them.
"""

from __future__ import annotations

import click

from rt_lab.cli.bench_cluster_cmd import cluster_bench
from rt_lab.cli.bench_cold_cmd import cold_start_bench
from rt_lab.cli.bench_floor_cmd import floor_bench
from rt_lab.cli.bench_log_cmd import log_bench
from rt_lab.cli.bench_peers_cmd import peers_bench
from rt_lab.cli.bench_replicate_cmd import replicate_bench
from rt_lab.cli.bench_spark_cmd import spark_bench

__all__ = ["bench"]


@click.group()
def bench() -> None:
    """Benchmarks. Each figure is the median of several runs; see docs/BENCHMARKS.md."""


for _suite in (
    peers_bench,
    log_bench,
    replicate_bench,
    cluster_bench,
    spark_bench,
    floor_bench,
    cold_start_bench,
):
    bench.add_command(_suite)
