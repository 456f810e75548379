"""``rt bench``: measure the appliance on this machine; results go to docs/BENCHMARKS.md."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import click

from rt_appliance.bench.log_bench import run_log_bench
from rt_appliance.bench.replicate_bench import run_replicate_bench
from rt_appliance.bench.report import markdown_table, write_section
from rt_appliance.bench.stats import Result, filesystem_of, machine_description

Command = Callable[..., None]


@click.group()
def bench() -> None:
    """Benchmarks. Each figure is the median of several runs; see docs/BENCHMARKS.md."""


def _common(suite: str, default_runs: int) -> Callable[[Command], Command]:
    """The options every benchmark takes: runs, memory, workdir, output, json."""

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
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _progress(suite: str) -> Callable[[str], None]:
    return lambda message: click.echo(f"rt bench {suite}: {message}", err=True)


def _report(
    suite: str, results: list[Result], workdir: Path, output: Path | None, as_json: bool, notes: str
) -> None:
    """Print the results, and write them with the command and machine into ``output``."""
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        click.echo(markdown_table(results))
    if output is not None:
        command = f"rt bench {suite} " + shlex.join(sys.argv[3:])
        machine = f"{machine_description()}; files on {filesystem_of(str(workdir))}"
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
    _report("log", results, workdir, output, as_json, _NOTES.format(payload=payload_bytes))


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
def replicate_bench(
    runs: int,
    memory_gb: float,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    fsync: str,
    backlog_gib: float,
) -> None:
    """Push replication: throughput and catch-up to 3 nodes, latency, memory.

    Starts 3 push servers on 127.0.0.1-3 and a push client with real mutual TLS.
    Latency: publish at 5,000 msg/s for 10 s; a follower on one node's replica
    measures publish-to-replica time. Catch-up: time for every node to hold a
    backlog written beforehand (the aggregate throughput is 3 x backlog / time).
    Memory: daemon RSS while --memory-gb is moved to every node.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    results = run_replicate_bench(
        workdir, runs, int(backlog_gib * 2**30), int(memory_gb * 1e9), _progress("replicate"), fsync
    )
    _report("replicate", results, workdir, output, as_json, _REPLICATE_NOTES)


_NOTES = """\
Payloads are {payload} bytes (128-byte records with the 28-byte record header); each run
uses a fresh directory; figures are medians. What limits each figure:

- single-call publish pays one `write` system call per message (about 1 us on this
  machine) plus the interpreter's work per call, so it sits at the target; a trial with
  the whole publish path inlined into one function reached 384,000-442,000 msg/s on the
  same machine, so little is left to gain in Python;
- batch publish pays one `write` per batch; its cost is encoding (one CRC-32 per record);
- fsync=batch adds one `fdatasync` per 1,000-message batch, so it follows the disk;
- subscribe, verify and recovery walk the length fields in Python, gather the fixed
  header fields of a whole buffer at once with numpy and check every record's CRC-32;
  subscribe also copies each payload out;
- memory: the publisher keeps nothing per message; the subscriber keeps one 4 MiB read
  buffer and one batch.
"""


_REPLICATE_NOTES = """\
Everything runs on this one 2-core machine: the publisher, the push client, three push
servers and the latency follower. What limits the figures:

- throughput and catch-up are CPU-bound: during a 256 MiB catch-up the four daemons kept
  both cores busy (client 3.4 s of CPU, servers 1.7-2.1 s each, over 4.6 s). The client
  reads each byte once per node, checks its CRC once (the per-node readers share their
  checks) and encrypts it three times; each server decrypts it, checks every record's
  CRC, writes and syncs it;
- latency: appends to a file wait while a sync of it runs, even one in another thread.
  Servers therefore sync at most every `replication.sync_interval_ms` (10 ms): that took
  the p99 from 35 ms (syncing as soon as data arrived) to the 7 ms above, p50 0.8 ms.
  Without syncs at all (`--fsync never`, replicas acknowledged once written) an earlier
  `rt bench replicate --runs 3 --backlog-gib 0.05 --memory-gb 0 --fsync never` measured
  p50 0.84 ms and p99 2.18 ms (runs 2.08-2.87); the rest is five processes woken per
  message on two cores;
- memory: each daemon grows by its frame buffers (about 20 MB) whatever it moves.
"""
