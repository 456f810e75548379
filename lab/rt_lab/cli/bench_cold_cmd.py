"""``rt bench cold-start``: a node's time from exec to READY, holding N GiB of merged log."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from rt_lab.cli.bench_report import load_range, report, source_commit
from rt_lab.cli.options import bench_options, flag, progress

__all__ = ["cold_start_bench"]


def _sizes(ctx: click.Context, param: click.Parameter, value: Any) -> list[float]:
    from rt_lab.bench.cold_start import parse_sizes

    try:
        return parse_sizes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


@click.command("cold-start")
@bench_options("cold-start", default_runs=3, memory_gb=False)
@click.option(
    "--gib",
    "sizes",
    multiple=True,
    default=["1"],
    show_default=True,
    callback=_sizes,
    help="GiB of merged log the node holds; repeat it or give a comma list for several "
    "sizes (built one after another in one stream, smallest first).",
)
@flag("--keep", "Keep the work directory (the stream, its data and logs) at the end.")
def cold_start_bench(
    runs: int,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    sizes: list[float],
    keep: bool,
) -> None:
    """A node's cold start: from exec of `rt node` to READY, with N GiB of merged log.

    Fills a 1-node stream's merged log through the real path (a publisher, `rt
    push-client`, `rt node` merging), nothing pruned from it, until it holds each
    --gib; then, with nothing published, restarts the node --runs times after a
    clean stop (SIGTERM) and after a crash (SIGKILL). Each restart is timed from
    just before the exec until the node logs its `ready:` line (READY=1 to
    systemd), and split by the log's stamps into exec to `node rt-1 starting`
    (interpreter, imports, config, opening the logs) and from there to `ready:`.
    Also reports the merged log's bytes and files on disk. Needs 2.2 x the
    largest --gib free on --workdir's filesystem.
    """
    from rt_lab.bench.cold_start import TARGET_GIB, check_space, run_cold_start_bench

    workdir.mkdir(parents=True, exist_ok=True)
    check_space(workdir, sizes)
    say = progress("rt bench cold-start")
    work = Path(tempfile.mkdtemp(prefix="cold-start-", dir=workdir))
    try:
        found, loads = run_cold_start_bench(work, sizes, runs, say)
    finally:
        if keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    results = [result for figures in found for result in figures.results()]
    verdicts = [line for figures in found for line in figures.verdicts()]
    notes = "\n".join(verdicts)
    if notes:
        notes = (
            f"Target: READY within 1.5 s of exec with {TARGET_GIB:g} GiB of merged log.\n\n{notes}"
        )
    machine = (
        f"; {load_range(loads)} as the restarts started{source_commit()}; "
        "1 node, 64 KiB payloads, publisher and inputs rolling every 64 MiB, "
        "sequencer.merged_roll_bytes 1 GiB (default), archiver.max_disk_usage_percent 100"
    )
    report("cold-start", results, workdir, output, as_json, notes, machine)
