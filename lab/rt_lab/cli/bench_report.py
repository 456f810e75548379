"""What the ``rt bench`` suites print and write into docs/BENCHMARKS.md besides their
figures: the command as typed, the machine, its load, the code's commit."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import click

from rt_lab.bench.report import markdown_table, write_section
from rt_lab.bench.stats import Result, filesystem_of, machine_description

__all__ = ["command_line", "load_range", "machine_line", "report", "source_commit"]

_SOURCES = ("rt_appliance", "lab")  # the code a figure depends on


def command_line(suite: str) -> str:
    """``rt bench SUITE`` with the options it was given, so a reader can run it again."""
    # argv is ``rt bench SUITE ...`` from the console script: the options start at [3].
    return (f"rt bench {suite} " + shlex.join(sys.argv[3:])).strip()


def machine_line(workdir: Path) -> str:
    """The machine, and the filesystem the benchmark's files were on (it sets sync costs)."""
    return f"{machine_description()}; files on {filesystem_of(str(workdir))}"


def load_range(loads: list[float]) -> str:
    """The lowest and highest 1-minute load average seen, so a busy machine shows."""
    seen = loads or [0.0]
    return f"1-minute load average {min(seen):.1f}-{max(seen):.1f}"


def report(
    suite: str,
    results: list[Result],
    workdir: Path,
    output: Path | None,
    as_json: bool,
    notes: str = "",
    machine_extra: str = "",
) -> None:
    """Print the results, and write them with the command and machine into ``output``;
    ``notes``: what the run found beyond the table (verdicts, stalls), also written."""
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        click.echo(markdown_table(results))
    if output is not None:
        machine = machine_line(workdir) + machine_extra
        write_section(output, suite, command_line(suite), machine, results, notes)


def source_commit() -> str:
    """ "; code at commit X" when the package runs from a git checkout, else ""."""
    root = str(Path(__file__).resolve().parents[3])
    try:
        commit = _git(root, "rev-parse", "--short", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *_SOURCES)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"; code at commit {commit}" + (" with local changes" if changed else "")


def _git(root: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", root, *args], capture_output=True, text=True, check=True
    ).stdout.strip()
