"""``rt bench peers``: NATS JetStream, a RabbitMQ stream and Redis Streams beside ours."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from rt_lab.bench.peers.report import notes, plot_cdf, table
from rt_lab.bench.peers.runner import SYSTEMS, PeersOptions, run_peers_bench
from rt_lab.bench.report import write_markdown_section
from rt_lab.cli.bench_report import command_line, load_range, machine_line
from rt_lab.cli.options import (
    AS_JSON,
    option,
    output_option,
    progress,
    runs_option,
    seconds_option,
    split_commas,
    workdir_option,
)

__all__ = ["peers_bench"]

DEFAULT_PLOT = Path("docs/latency-cdf.png")


def _systems(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(split_commas(value)))  # each system once, in order given
    unknown = [v for v in chosen if v not in SYSTEMS]
    if unknown or not chosen:
        raise click.BadParameter(f"choose from {','.join(SYSTEMS)} (got {value!r})")
    return chosen


@click.command("peers")
@runs_option(3, "Runs per row; the table shows the medians of the runs that passed.")
@option(
    "--only",
    click.STRING,
    ",".join(SYSTEMS),
    "Comma-separated systems to run: nats, rabbitmq, redis (both rows), rt (both rows).",
    _systems,
)
@option(
    "--messages",
    click.IntRange(2000),
    200_000,
    "Messages of the throughput phase (rt-appliance: half per publisher).",
)
@option("--latency-rate", click.IntRange(1, 1_000_000), 5_000, "msg/s of the latency phase.")
@seconds_option("--latency-seconds", 10.0, "Length of the latency phase.")
@workdir_option(
    "Where the servers' data, logs and the streams go (a directory "
    "rt-bench-peers-* in it, removed unless a run failed).",
    Path("/tmp"),
)
@output_option("peers")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"PNG of the latency CDF  [default: {DEFAULT_PLOT} with --output, else none]",
)
@AS_JSON
def peers_bench(
    runs: int,
    only: tuple[str, ...],
    messages: int,
    latency_rate: int,
    latency_seconds: float,
    workdir: Path,
    output: Path | None,
    plot: Path | None,
    as_json: bool,
) -> None:
    """Our stream beside NATS JetStream, a RabbitMQ stream and Redis Streams.

    Runs the same two phases, with 100-byte messages, on each system on this
    machine, in one run of this command:

    \b
    throughput  --messages as fast as the client allows; first publish ->
                the subscriber holds them all (msg/s)
    latency     --latency-rate msg/s for --latency-seconds, publish ->
                subscriber per message (p50, p99, max; the publisher sends
                what is due every 1 ms)

    A peer's run passes only if its subscriber received each message once and
    in order; an rt-appliance run, if `rt bench cluster` succeeded (it checks
    the count its subscriber read). A run that fails is listed and left out
    of the medians, and the command exits with status 1.

    \b
    Rows, and how durable an acknowledged message is:
    rt-appliance          `rt bench cluster`: a 3-node stream, mutual TLS;
                          publisher fsync never, replicas synced before
                          they acknowledge (replication fsync batch),
                          raft journal synced
    rt-appliance, replication fsync never
                          the same, but push servers, sequencer inputs
                          and the pull client do not sync; the raft
                          journal is still synced (skipped if rt bench
                          cluster has no --replication-fsync)
    NATS JetStream R3     3 nats-servers, file storage; acknowledged once
                          2 of 3 stored it; files synced every 2 minutes
                          (the default sync_interval)
    RabbitMQ stream       1 node; streams never fsync
    Redis, always         AOF appendfsync always: synced before the reply
    Redis, everysec       AOF appendfsync everysec: synced once a second

    The peers' servers (Debian's nats-server, rabbitmq-server, redis-server)
    are started by this command on 127.0.0.1 with their data under --workdir
    and stopped at the end, also on errors and Ctrl-C; no system service is
    used. Their Python clients come from the `peers` extra. `make
    bench-peers` installs both and runs this command with --output.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    opts = PeersOptions(workdir, runs, only, messages, latency_rate, latency_seconds)
    report = run_peers_bench(opts, progress("rt bench peers"))
    if plot is None and output is not None:
        plot = DEFAULT_PLOT
    if plot is not None and not plot_cdf(report.rows, plot, latency_rate):
        plot = None
    machine = f"{machine_line(workdir)}; {load_range(report.loads)} as the runs started"
    command = command_line("peers")
    if as_json:
        body = {
            "command": command,
            "machine": machine,
            "plot": None if plot is None else str(plot),
            "rows": [r.as_dict() for r in report.rows],
        }
        click.echo(json.dumps(body, indent=2))
    else:
        click.echo(table(report.rows))
        if plot is not None:
            click.echo(f"\nlatency CDF: {os.fspath(plot)}")
    if output is not None:
        text = notes(report, opts, plot, output)
        write_markdown_section(output, "peers", command, machine, table(report.rows), text)
    if any(not r.passed and not r.skipped for r in report.rows):
        raise SystemExit(1)
