"""Click options shared by the lab's ``rt`` commands (``bench``, ``bench peers``, ``chaos``,
``demo``), and the progress line they print on stderr.

An option that several commands take (--workdir, --output, --json, --runs, --nodes) is
defined here once, so its type and wording cannot drift between commands; what differs
between them (a help text, a default) is an argument. ``option`` and ``flag`` keep a
command's own options to a line or two each, so a long list of them stays readable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

__all__ = [
    "AS_JSON",
    "Callback",
    "Command",
    "Decorator",
    "Progress",
    "bench_options",
    "flag",
    "nodes_option",
    "option",
    "output_option",
    "progress",
    "runs_option",
    "seconds_option",
    "split_commas",
    "stack",
    "workdir_option",
]

Command = Callable[..., None]
Decorator = Callable[[Command], Command]
Progress = Callable[[str], None]
Callback = Callable[[click.Context, click.Parameter, Any], Any]


def stack(*decorators: Decorator) -> Decorator:
    """The decorators as if written one above the other in this order: the first is the
    outermost, so its option comes first in --help."""

    def decorate(command: Command) -> Command:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


def option(
    name: str,
    kind: click.ParamType[Any],
    default: object,
    help: str | None = None,
    callback: Callback | None = None,
) -> Decorator:
    """``name`` taking a ``kind``, with its default shown in --help as lab options do;
    ``callback`` turns the value into what the command gets.

    Click shows no default that is None; such an option says in ``help`` what it does
    without one."""
    return click.option(
        name, type=kind, default=default, show_default=True, help=help, callback=callback
    )


def flag(name: str, help: str) -> Decorator:
    """An on/off option, off unless given."""
    return click.option(name, is_flag=True, help=help)


#: ``--json``: results on stdout as JSON instead of a table (parameter ``as_json``).
AS_JSON = click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")


def workdir_option(help: str, default: Path | None = None, required: bool = False) -> Decorator:
    """``--workdir``, a directory that need not exist yet; its default is shown if any."""
    return click.option(
        "--workdir",
        type=click.Path(file_okay=False, path_type=Path),
        default=default,
        required=required,
        show_default=default is not None,
        help=help,
    )


def output_option(suite: str) -> Decorator:
    """``--output``: the Markdown file (docs/BENCHMARKS.md) that gets the results of
    ``rt bench SUITE`` in a section of their own."""
    return click.option(
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Markdown file whose 'rt bench {suite}' section is replaced with the results.",
    )


def runs_option(default: int, help: str = "Runs per figure.") -> Decorator:
    """``--runs``: how many times a benchmark is repeated for its medians."""
    return option("--runs", click.IntRange(1, 50), default, help)


def seconds_option(
    name: str, default: float | None, help: str, least: float = 0.5, most: float | None = 600
) -> Decorator:
    """A length of time in seconds; unless told otherwise, that of a measuring run, which
    is long enough for a few samples and short enough for a suite of many runs."""
    return option(name, click.FloatRange(least, most), default, help)


def nodes_option(choices: Sequence[str], help: str) -> Decorator:
    """``--nodes``: how many RT nodes the stream has (a string: ``click.Choice`` takes
    only strings here); 3 unless given."""
    return option("--nodes", click.Choice(choices), "3", help)


def bench_options(suite: str, default_runs: int, memory_gb: bool = True) -> Decorator:
    """What every ``rt bench`` suite but peers takes, in this order: --runs, --memory-gb
    (unless ``memory_gb`` is false), --workdir, --output and --json."""
    memory = option(
        "--memory-gb", click.FloatRange(0), 5.0, "GB moved while sampling memory (0 skips it)."
    )
    return stack(
        runs_option(default_runs),
        *([memory] if memory_gb else []),
        workdir_option("Where the benchmark's temporary directories go.", Path("/tmp")),
        output_option(suite),
        AS_JSON,
    )


def split_commas(value: str) -> tuple[str, ...]:
    """The items of a comma-separated option value, blanks around them and empty ones
    dropped, so that "a, b," means a and b."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


def progress(command: str = "") -> Progress:
    """Print a line of progress on stderr, after ``command: `` if one is named, so that
    stdout keeps only the results."""
    prefix = f"{command}: " if command else ""
    return lambda message: click.echo(prefix + message, err=True)
