"""Render ``docs/CLI.md`` from the commands' own help, so the docs cannot drift."""

from __future__ import annotations

import click

from rt_appliance.cli.main import cli

__all__ = ["render_cli_markdown"]

_INTRO = (
    "# The `rt` command\n\n"
    "Generated from the commands' own `--help` (`make docs`); "
    "`rt COMMAND --help` prints the same.\n\n"
    "Exit status: 0 success, 1 an operating error (corruption, a full disk, a held lock; "
    "one line on stderr), 2 bad usage.\n"
)


def render_cli_markdown() -> str:
    parts = [_INTRO]

    def walk(command: click.Command, path: list[str]) -> None:
        ctx = click.Context(
            command,
            info_name=" ".join(path),
            max_content_width=100,
            terminal_width=100,
            help_option_names=["-h", "--help"],  # as `rt` itself sets for every command
        )
        parts.append(f"\n## `{' '.join(path)}`\n\n```\n{command.get_help(ctx)}\n```\n")
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):  # with rt-lab's commands (cli/lab.py)
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*path, name])

    walk(cli, ["rt"])
    return "".join(parts)


if __name__ == "__main__":
    print(render_cli_markdown(), end="")
