"""``rt chaos``: a stream on this machine under load and seeded faults, then a verdict."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import click

from rt_lab.chaos.schedule import ELECTION_S, FAULTS
from rt_lab.cli.options import (
    flag,
    nodes_option,
    option,
    progress,
    seconds_option,
    split_commas,
    workdir_option,
)

_DEFAULT_FAULTS = ",".join(FAULTS)


def _faults(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    chosen = split_commas(value)
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; choose from {_DEFAULT_FAULTS}")
    return chosen


@click.command()
@nodes_option(["3", "5"], "RT nodes.")
@option(
    "--minutes",
    click.FloatRange(0.25, 24 * 60),
    2.0,
    "How long faults are injected under load (recovery and the check come after).",
)
@option(
    "--faults",
    click.STRING,
    _DEFAULT_FAULTS,
    "Comma-separated faults to draw from. partition, disk-full and power-loss need root; "
    "without it the run moves into a user namespace, where partitions work, full disks "
    "are tmpfs and power-loss is left out (the report says what was left out and why). "
    "Where no user namespace can be made either, partitions go through TCP relays.",
    _faults,
)
@option(
    "--partitions",
    click.Choice(["auto", "namespaces", "relays"]),
    "auto",
    "How partitions are made: a network namespace per node (root, or a user "
    "namespace), or every link through a TCP relay that stops carrying it (no privilege "
    "at all); auto takes namespaces where they can be made.",
)
@option(
    "--seed",
    click.INT,
    None,
    "Seed of the schedule; the same seed gives the same faults  [default: random, printed]",
)
@option(
    "--rate",
    click.FloatRange(1, 100_000),
    200.0,
    "Messages per second of each of the four publishers.",
)
@seconds_option(
    "--settle-seconds",
    120.0,
    "After the faults, how long the stream may take to converge before it counts as stuck.",
    least=5,
    most=3600,
)
@seconds_option(
    "--max-stall",
    ELECTION_S + 1.0,
    "Longest a one-node fault may stop merging (a kill, pause, full disk, corruption or "
    "clock jump of one host, a partition that leaves a majority together) before the run "
    "fails  [default: the longest election timeout + 1 s].",
    least=0.2,
    most=3600,
)
@workdir_option(
    "Directory for the stream, the journals and the report (must be empty or new).", required=True
)
@flag(
    "--schedule-only",
    "Print the schedule the seed gives on this machine (faults it cannot inject left "
    "out) and exit.",
)
def chaos(
    nodes: str,
    minutes: float,
    faults: tuple[str, ...],
    seed: int | None,
    rate: float,
    settle_seconds: float,
    max_stall: float,
    workdir: Path,
    schedule_only: bool,
    partitions: str,
) -> None:
    """Run a stream under load while injecting faults from a seeded schedule, then judge it.

    \b
    The stream: NODES nodes (each its own network namespace as root), two
    publishers on plain topics and a redundant pair on quotes.dedup, two
    subscriber hosts each with a subscriber application that keeps its restart
    position. The faults (one at a time, a quiet gap after each):
      kill        SIGKILL a daemon, a whole node, several nodes, the leader's
                  sequencer, a client daemon or an application; restart it later
      pause       SIGSTOP then SIGCONT, sometimes past the election timeout
      partition   halves, a minority, a lone leader, a bridge, one-way loss
      clock       a node's wall clock jumps forward or back (rt_appliance.clock)
      corrupt     flip a bit, truncate, or zero a block of a file of one node's
                  input replicas or merged log, while it runs
      disk-full   a node's filesystem fills up, then has room again
      power-loss  every node loses what it had not synced (loop-mounted ext4)

    \b
    Then publishers stop and the stream must settle within --settle-seconds. The
    checker counts: lost (acknowledged, never delivered), duplicated, reordered,
    unexpected, dedup (an id delivered twice), divergent (logs or copies that
    differ), stuck. Messages never acknowledged may be lost; they are counted
    apart. Availability: for every fault, how long merging stood still (from its
    start to the first advance after it ends); a one-node fault that stopped it
    longer than --max-stall fails the run (faults that take a majority, and a
    fault that began while the one before still recovered, are reported, not
    judged). Writes report.json, report.md and timeline.png to
    --workdir. Exit status 1 on any violation; the seed is printed either way.
    """
    from rt_lab.chaos import userns
    from rt_lab.chaos.schedule import draw_schedule

    seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
    if userns.wanted(faults, partitions) and not schedule_only:
        why = userns.unavailable()
        if why is None:
            click.echo(
                "rt chaos: not root; going on in a user namespace of its own (partitions, "
                "and full disks on tmpfs; power-loss needs root)",
                err=True,
            )
            userns.reexec([*sys.argv[1:], "--seed", str(seed)])
        click.echo(
            f"rt chaos: no user namespace ({why}); partitions go through TCP relays", err=True
        )
    if userns.inside():
        userns.prepare()
    seconds = minutes * 60
    if schedule_only:
        from rt_lab.chaos.world import available_faults

        usable, missing = available_faults(faults, partitions)
        for name, why in missing.items():
            click.echo(f"left out: {name} ({why})", err=True)
        for fault in draw_schedule(seed, seconds, int(nodes), usable):
            click.echo(f"{fault.at_s:8.1f}s  {fault.describe()}")
        return
    if workdir.exists() and any(workdir.iterdir()):
        raise click.UsageError(f"--workdir {workdir} is not empty")
    from rt_lab.chaos.report import summary, write_report
    from rt_lab.chaos.runner import ChaosOptions, run_chaos

    click.echo(f"rt chaos: seed {seed}")
    options = ChaosOptions(
        workdir.resolve(),
        seed,
        int(nodes),
        seconds,
        faults,
        rate,
        settle_seconds,
        partitions,
        max_stall,
    )
    result = run_chaos(options, progress())
    paths = write_report(result, workdir)
    click.echo(summary(result))
    click.echo(f"report: {paths['markdown']}  timeline: {paths['timeline']}")
    click.echo(f"seed {seed}")
    if not (result.safe and result.available):
        sys.exit(1)
