"""``rt demo``: run the data path on this machine with real files and processes."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import click

from rt_appliance.cli.options import SIZE
from rt_appliance.demo.single_host import run_single_host


@click.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the demo's files  [default: a new temporary directory]",
)
@click.option(
    "--duration",
    type=click.FloatRange(0.5, 3600),
    default=5.0,
    show_default=True,
    help="Seconds of publishing.",
)
@click.option(
    "--rate",
    type=click.IntRange(1, 1_000_000),
    default=5000,
    show_default=True,
    help="Messages per second.",
)
@click.option(
    "--roll-bytes",
    type=SIZE,
    default=64 << 10,
    show_default="64KiB",
    help="File size at which the publisher rolls, small so the demo shows rolls.",
)
@click.option("--keep", is_flag=True, help="Keep the work directory (a temporary one is deleted).")
def demo(workdir: Path | None, duration: float, rate: int, roll_bytes: int, keep: bool) -> None:
    """Publish, follow, resume and verify a stream on this machine.

    A Publisher writes numbered messages to stream files; a separate
    `rt subscribe --follow` process delivers them as they land; a second
    subscriber resumes from a stored position; `rt log verify` checks every
    record. Prints a summary and writes WORKDIR/summary.json. Exit status 1 if
    any message was missing or duplicated.
    """
    temporary = workdir is None
    work = Path(tempfile.mkdtemp(prefix="rt-demo-")) if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    try:
        summary = run_single_host(work, rate, duration, roll_bytes, click.echo)
        click.echo("6. summary (" + str(work / "summary.json") + ")")
        click.echo(json.dumps(summary, indent=2))
        if temporary:
            click.echo(f"kept {work}" if keep else f"removed {work} (use --keep to leave it)")
    finally:
        if temporary and not keep:
            shutil.rmtree(work, ignore_errors=True)
    ok = (
        summary["missing"] == 0
        and summary["duplicated"] == 0
        and summary["verify_ok"]
        and summary["resume_ok"]
    )
    if not ok:
        raise SystemExit(1)
