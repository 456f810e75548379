"""``rt demo``: run the whole stream on this machine with real daemons, files and processes."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import click

from rt_appliance.cli.options import SIZE
from rt_appliance.errors import UsageError
from rt_lab.cli.options import flag, nodes_option, option, seconds_option, workdir_option
from rt_lab.demo.cluster import ClusterDemoOptions, run_cluster
from rt_lab.demo.single_host import run_single_host


@click.command()
@flag(
    "--single-host",
    "The older demo without nodes: a Publisher, an `rt subscribe --follow` process, "
    "a resume and `rt log verify` on one stream directory.",
)
@nodes_option(["1", "3", "5", "7"], "RT nodes, on 127.0.0.1, .2, .3 ...")
@workdir_option("Directory for the demo's files  [default: a new temporary directory]")
@seconds_option(
    "--duration", None, "Seconds of publishing  [default: 10; 5 with --single-host]", most=3600
)
@option(
    "--rate",
    click.IntRange(1, 1_000_000),
    None,
    "Messages per second of each publisher  [default: 500; 5000 with --single-host]",
)
@click.option(
    "--roll-bytes",
    type=SIZE,
    default=64 << 10,
    show_default="64KiB",
    help="File size at which publishers roll, small so the demo shows rolls.",
)
@flag(
    "--kill-leader",
    "SIGKILL the leader's node process halfway, time the failover (until another node "
    "leads and the merged log advances again), then restart it to catch up. Needs 3+ nodes.",
)
@flag(
    "--no-spark",
    "Skip step 8: the Spark pipeline on a node's merged log (needs Java 17; it took "
    "about 16 s here for Spark to start and run).",
)
@flag(
    "--free-ports",
    "Use unused ports instead of the defaults (5000-5002, 7100, 8000, 4000-4004), "
    "e.g. beside a running stream. The demo does so by itself when a default is taken.",
)
@flag("--keep", "Keep the work directory (a temporary one is deleted).")
def demo(
    single_host: bool,
    nodes: str,
    workdir: Path | None,
    duration: float | None,
    rate: int | None,
    roll_bytes: int,
    kill_leader: bool,
    no_spark: bool,
    free_ports: bool,
    keep: bool,
) -> None:
    """Run a whole stream on this machine: nodes, replication, sequencer, subscriber.

    Writes a configuration for NODES nodes on 127.0.0.1, .2, .3 ... with a
    certificate per host, and starts the real daemons as processes: on every
    node `rt node` (push server, sequencer and pull server); `rt push-client`
    on the publisher hosts pub-1 and pub-2; `rt pull-client` on the subscriber
    host sub-1. Two publisher applications write numbered JSON trades (pub-1 topic
    trades, pub-2 topic quotes); an `rt subscribe --follow` process reads sub-1's
    copy of the merged log. At the end the demo checks that every node's merged
    log is byte-identical and that every message arrived exactly once, in order,
    then (unless --no-spark) runs the Spark pipeline on a node's merged log into
    Parquet, checks its row count and prints per-minute VWAP rows.

    Prints each step, writes WORKDIR/summary.json (see docs/DEMO.md) and exits
    with status 1 if a message was missing or duplicated, the merged logs
    differ, the Parquet output lacks rows, or a requested failover did not
    happen. Ctrl-C or SIGTERM stops every process the demo started (exit
    status 130).
    """
    if single_host and (kill_leader or nodes != "3" or free_ports):
        raise UsageError("--nodes, --kill-leader and --free-ports belong to the cluster demo")
    if kill_leader and nodes == "1":
        raise UsageError(
            "--kill-leader needs at least 3 nodes: one node has nobody to fail over to"
        )
    temporary = workdir is None
    work = Path(tempfile.mkdtemp(prefix="rt-demo-")) if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    try:
        if single_host:
            summary = _single_host(work, duration or 5.0, rate or 5000, roll_bytes)
        else:
            options = ClusterDemoOptions(
                workdir=work,
                nodes=int(nodes),
                duration_s=duration or 10.0,
                rate=rate or 500,
                kill_leader=kill_leader,
                spark=not no_spark,
                roll_bytes=roll_bytes,
                ports="free" if free_ports else "default",
            )
            summary = _cluster(options)
        if temporary:
            click.echo(f"kept {work}" if keep else f"removed {work} (use --keep to leave it)")
    finally:
        if temporary and not keep:
            shutil.rmtree(work, ignore_errors=True)
    if not summary["ok"]:
        raise SystemExit(1)


def _single_host(work: Path, duration: float, rate: int, roll_bytes: int) -> dict[str, Any]:
    summary = run_single_host(work, rate, duration, roll_bytes, click.echo)
    click.echo("6. summary (" + str(work / "summary.json") + ")")
    click.echo(json.dumps(summary, indent=2))
    summary["ok"] = (
        summary["missing"] == 0
        and summary["duplicated"] == 0
        and summary["verify_ok"]
        and summary["resume_ok"]
    )
    return summary


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C; a second signal is ignored while the demo stops its processes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _cluster(options: ClusterDemoOptions) -> dict[str, Any]:
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = run_cluster(options, click.echo)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    click.echo("9. summary (" + str(options.workdir / "summary.json") + ")")
    click.echo(json.dumps(summary, indent=2))
    click.echo(
        "ok: every message once, in order; merged logs identical"
        if summary["ok"]
        else "FAILED: see the summary above and the daemon logs"
    )
    return summary
