"""The group of ``rt``'s commands, each imported only when used; with the commands it
takes from rt-lab: ``demo``, ``bench`` and ``chaos``.

They live in a distribution of their own (``lab/``), which the product's packages do not
carry. rt-lab declares them as entry points of the group ``rt.commands``; this group loads
one only when it is called (or listed), so a daemon's ``rt`` never imports the lab. Where
rt-lab is not installed, each name still answers, with one line saying what to install,
and exit code 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import click

ENTRY_POINT_GROUP = "rt.commands"

#: The commands rt-lab provides, with the line ``rt --help`` shows when it is missing.
LAB_COMMANDS = {
    "demo": "A whole stream on this machine, narrated (needs rt-lab).",
    "bench": "Benchmarks: throughput, latency, peers side by side (needs rt-lab).",
    "chaos": "A stream under faults, judged by a checker (needs rt-lab).",
}

INSTALL_HINT = (
    "it comes with rt-lab, the workbench around rt-appliance, which is not installed here; "
    "from a source checkout: pip install -e . -e ./lab (or make demo)"
)


def _installed() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _missing(name: str) -> click.Command:
    """A stand-in for a lab command that is not installed: one line, exit 2."""

    def explain() -> None:
        click.echo(f"rt: `rt {name}` is not available: {INSTALL_HINT}", err=True)
        raise SystemExit(2)

    return click.Command(
        name,
        callback=explain,
        help=LAB_COMMANDS[name],
        short_help=LAB_COMMANDS[name],
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


def _load(entry: EntryPoint) -> click.Command:
    try:
        command = entry.load()
    except ImportError as exc:
        raise click.ClickException(
            f"`rt {entry.name}` is installed ({entry.value}) but does not load: {exc}"
        ) from exc
    if not isinstance(command, click.Command):
        raise click.ClickException(
            f"`rt {entry.name}` ({entry.value}) is not a command but {type(command).__name__}"
        )
    return command


class LabGroup(click.Group):
    """A click group whose commands are imported when used: its own (``lazy``: name ->
    ``module:attribute``) and the ``rt.commands`` entry points."""

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy, *LAB_COMMANDS, *_installed()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        if cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            loaded = getattr(importlib.import_module(module), attribute)
            if not isinstance(loaded, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.add_command(loaded, cmd_name)
            return loaded
        entry = _installed().get(cmd_name)
        if entry is not None:
            return _load(entry)
        if cmd_name in LAB_COMMANDS:
            return _missing(cmd_name)
        return None
