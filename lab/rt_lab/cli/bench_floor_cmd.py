"""``rt bench floor``: what each kind of step on a message's path costs on this machine."""

from __future__ import annotations

from pathlib import Path

import click

from rt_lab.cli.bench_report import report, source_commit
from rt_lab.cli.options import bench_options, option, progress, seconds_option

__all__ = ["floor_bench"]

_BUSY_RATE = 1000  # steps per second of the busy runs: the latency runs' publishing tick


@click.command("floor")
@bench_options("floor", default_runs=3, memory_gb=False)
@seconds_option("--seconds", 5.0, "Length of each step's run at each rate.")
@option("--idle-rate", click.IntRange(1, 1000), 20, "Steps per second of the idle runs.")
@option(
    "--loop",
    click.Choice(["asyncio", "uvloop", "both"]),
    "asyncio",
    "The event loop of the steps that wait on one (tls, inotify, thread); both: "
    "asyncio's and uvloop's side by side, one after the other in every run.",
)
def floor_bench(
    runs: int,
    workdir: Path,
    output: Path | None,
    as_json: bool,
    seconds: float,
    idle_rate: int,
    loop: str,
) -> None:
    """The least each kind of step on a message's path costs here, and the floors they set.

    \b
    tls      a 100-byte frame between two Python processes over mutual TLS 1.3
             on asyncio (half a round trip; CPU of both processes)
    inotify  a process waiting on an inotify watch wakes when another one
             appends 100 bytes, and reads them
    sync     fdatasync of a 100-byte append on --workdir's disk
    thread   an asyncio loop hands a call to a worker thread and gets it back

    Each at --idle-rate and at 1,000 per second (one per millisecond, the
    publishing tick of the latency runs): latency p50 and p99, CPU per step.
    Then the floors of a 3-node stream on this machine, each as an idle
    latency (the steps one after another, at their p50) and as the CPU of one
    trip per publishing tick of a millisecond:

    
    floor                 a message's path as rt lays it out, Publisher to
                          rt node to Subscriber: 4 tls, 1 sync, 3 thread
    floor between hosts   what any 3-node stream crosses between hosts:
                          4 tls (publisher, entry, answer, subscriber), 1 sync

    See docs/BENCHMARKS.md, "rt bench floor", for the steps.
    """
    from rt_lab.bench.floor import LOOPS, FloorResults, run_floor_bench

    workdir.mkdir(parents=True, exist_ok=True)
    loops = LOOPS if loop == "both" else (loop,)
    found = {name: FloorResults(idle_rate, _BUSY_RATE, loop=name) for name in loops}
    say = progress("rt bench floor")
    for run in range(1, runs + 1):

        def said(line: str, run: int = run) -> None:  # "run 1/1 on ...": this run of all
            say(f"run {run}/{runs} " + line.split(" ", 2)[2])

        for name in loops:  # interleaved, so both see the same machine
            one = run_floor_bench(workdir, 1, seconds, idle_rate, _BUSY_RATE, said, name)
            found[name].runs.extend(one.runs)
    results = [result for name in loops for result in found[name].results()]
    report("floor", results, workdir, output, as_json, "", source_commit())
