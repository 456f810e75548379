"""``rt replication status``: replication connections, their state and lag."""

from __future__ import annotations

import json
from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG
from rt_appliance.config import load_config
from rt_appliance.replicate.status import collect_status


@click.group()
def replication() -> None:
    """Inspect push and pull replication."""


@replication.command()
@CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def status(config_path: Path, as_json: bool) -> None:
    """Show every replication connection: state, acknowledged position and lag in bytes.

    Reads the Prometheus metrics each push and pull daemon serves; a daemon that
    does not answer is shown as unreachable. A push connection whose node keeps
    refusing the same bytes (5 times in a row) is "stuck": the line after it names
    the file, the offset and the node's reason. Exit status 1 if any connection is
    not connected.
    """
    rows = collect_status(load_config(config_path))
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        line = "{:<5} {:<12} {:<10} {:<28} {:<13} {:>20} {:>12}"
        click.echo(line.format("kind", "client", "node", "dir", "state", "acked", "lag_bytes"))
        for r in rows:
            acked = "-" if r.acked_position is None else str(r.acked_position)
            lag = "-" if r.lag_bytes is None else str(r.lag_bytes)
            click.echo(line.format(r.kind, r.client, r.node, r.dir, r.state, acked, lag))
            if r.problem:
                click.echo(f"      stuck at {r.problem}")
    if any(r.state != "connected" for r in rows):
        raise SystemExit(1)
