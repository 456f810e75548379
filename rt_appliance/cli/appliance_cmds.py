"""``rt validate``, ``rt config schema`` and ``rt apply``: from rt.yaml to systemd units."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from rt_appliance.appliance.apply import (
    Change,
    active_units,
    plan,
    reload_systemd,
    show_diff,
    systemd_running,
    write,
)
from rt_appliance.appliance.hostcheck import host_problems
from rt_appliance.appliance.render import UNIT_DIR, render_host
from rt_appliance.appliance.roles import roles_of
from rt_appliance.config import load_config
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import UsageError

__all__ = ["apply", "config_group", "validate"]

_DEFAULT_CONFIG = Path("/etc/rt/rt.yaml")


def _config_options(command: Callable[..., None]) -> Callable[..., None]:
    """The configuration, as ``--config FILE`` or as the one argument."""
    command = click.argument(
        "config_file",
        required=False,
        metavar="[CONFIG]",
        type=click.Path(dir_okay=False, path_type=Path),
    )(command)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"The stream's configuration file (rt.yaml)  [default: {_DEFAULT_CONFIG}]",
    )(command)


def _config_file(config_file: Path | None, config_path: Path | None) -> Path:
    if config_file is not None and config_path is not None and config_file != config_path:
        raise UsageError("give the configuration once: as an argument or with --config")
    return config_file or config_path or _DEFAULT_CONFIG


def _check_host(config: StreamConfig, host: str, root: Path) -> None:
    roles_of(config, host)  # a clear error if the host is not in the stream
    problems = host_problems(config, host, root)
    if problems:
        listed = "\n".join(f"  {p}" for p in problems)
        raise UsageError(f"host {host} cannot run its daemons:\n{listed}")


@click.command("validate")
@_config_options
@click.option(
    "--host",
    default=None,
    help="Also check this host's certificates and service user, as `rt apply` does.",
)
def validate(config_file: Path | None, config_path: Path | None, host: str | None) -> None:
    """Check a stream configuration; write nothing.

    Prints every problem as FILE:LINE: field.path: message and exits 2, or
    prints a one-line summary and exits 0. Every daemon and `rt apply` run the
    same checks when they start.
    """
    path = _config_file(config_file, config_path)
    config = load_config(path)
    if host is not None:
        _check_host(config, host, Path("/"))
    click.echo(
        f"{path}: valid: stream {config.stream}, {len(config.nodes)} node(s), "
        f"{len(config.publishers)} publisher host(s), {len(config.subscribers)} subscriber host(s)"
        + (f"; host {host} is ready" if host else "")
    )


@click.group("config")
def config_group() -> None:
    """The configuration file's format."""


@config_group.command("schema")
def schema() -> None:
    """Print the JSON Schema of rt.yaml (the package ships it as etc/rt.schema.json).

    Editors with YAML language support validate rt.yaml against it, for
    example with a first line `# yaml-language-server: $schema=rt.schema.json`.
    """
    click.echo(json.dumps(config_schema(), indent=2, sort_keys=True))


def config_schema() -> dict[str, object]:
    """The JSON Schema of the configuration model, with its identity."""
    doc = StreamConfig.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "rt-appliance stream configuration (rt.yaml)"
    return doc


@click.command("apply")
@_config_options
@click.option("--host", required=True, help="Name of this host in the configuration.")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write into the tree under this directory instead of / (staging, images, tests); "
    "systemd is not reloaded.",
)
@click.option(
    "--dry-run", is_flag=True, help="Print a unified diff of every change; write nothing."
)
def apply(
    config_file: Path | None, config_path: Path | None, host: str, root: Path | None, dry_run: bool
) -> None:
    """Install this host's systemd units and /etc/rt/rt.yaml from a stream configuration.

    The host's role decides its units: a node gets rt-sequencer, which runs
    `rt node` (push server, sequencer and pull server in one process); a
    publisher host rt-push-client; a subscriber host rt-pull-client. Units of a
    former layout or role that rt apply wrote are removed. Refuses (exit 2,
    nothing written) when the host is not in the configuration, or its
    certificate or key is missing, unreadable by the service user, for another
    host, or not signed by the stream's CA. Running it again changes nothing. Without --root it runs
    `systemctl daemon-reload` and names the units to restart; it never
    restarts anything itself.
    """
    path = _config_file(config_file, config_path)
    config = load_config(path)
    tree = root if root is not None else Path("/")
    _check_host(config, host, tree)
    kind, roles = roles_of(config, host)
    changes = plan(render_host(config, host, path.read_bytes()), tree)
    units = [role.unit for role in roles]
    where = f" under {root}" if root is not None else ""
    if not changes:
        up_to_date = ", ".join(units)
        click.echo(f"{host} ({kind.value}): nothing to change{where}: {up_to_date} up to date")
        return
    if dry_run:
        click.echo(show_diff(changes), nl=False)
        click.echo(f"{host} ({kind.value}): {len(changes)} file(s) would change{where}", err=True)
        return
    write(changes)
    for change in changes:
        click.echo(f"{change.action} {change.path}")
    if root is None:
        _after_write(changes, units)


def _after_write(changes: list[Change], units: list[str]) -> None:
    """Reload systemd and say which running units use old settings until restarted."""
    if not systemd_running():
        click.echo("systemd is not running here: nothing reloaded", err=True)
        return
    reload_systemd()
    click.echo("systemd reloaded")
    config_changed = any(not c.path.is_relative_to(UNIT_DIR) for c in changes)
    changed = units if config_changed else [u for u in units if UNIT_DIR / u in _paths(changes)]
    running = active_units(changed)
    if running:
        click.echo(f"restart to use the changes: systemctl restart {' '.join(running)}")
    stopped = [u for u in units if u not in active_units(units)]
    if stopped:
        click.echo(f"not running: start with: systemctl enable --now {' '.join(stopped)}")


def _paths(changes: list[Change]) -> set[object]:
    return {c.path for c in changes}
