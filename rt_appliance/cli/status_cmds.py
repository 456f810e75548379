"""``rt status``: the cluster's state, as every node reports it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG
from rt_appliance.config import load_config
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import UsageError
from rt_appliance.nodestatus import (
    Answer,
    NodeStatus,
    Unreachable,
    gather_status,
    leader_of,
    status_document,
)
from rt_appliance.position import Position


@click.command("status")
@CONFIG
@click.option(
    "--as",
    "as_host",
    default=None,
    help="Host whose certificate to connect with  [default: the first host with a key in tls.dir]",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(config_path: Path, as_host: str | None, as_json: bool) -> None:
    """Show every node of the stream: release, role, term, commit index, merged position, digest,
    lag per input, disk use, the holds of local consumers (the Spark pipeline) and
    who holds each lease (the Spark pipeline that fails over between nodes).
    A node whose writes fail (a full disk, EIO) is shown unfit to lead, with why: it
    gave up leading and stands for no election until it can write again. A node that
    started with no raft state (rebuilt, or added) is shown not voting yet until it has
    caught up.

    Asks each node's sequencer over the control channel (mutual TLS). Nodes at the
    same merged seq with the same digest hold byte-identical merged logs. Exit
    status 1 if a node cannot be reached, its merger is halted, or a hold has a gap
    (merged files pruned before the consumer committed them).
    """
    config = load_config(config_path)
    who = as_host or _default_identity(config)
    answers = asyncio.run(gather_status(config, who))
    if as_json:
        click.echo(json.dumps(status_document(config.stream, answers), indent=2))
    else:
        _print_table(config.stream, answers)
    if any(not isinstance(a, NodeStatus) or a.halted or a.gaps for a in answers.values()):
        raise SystemExit(1)


def _default_identity(config: StreamConfig) -> str:
    for host in config.all_hosts():
        if config.tls.key(host.name).exists():
            return host.name
    raise UsageError(f"no host key of this stream found (tls.dir {config.tls.dir}); pass --as HOST")


def _print_table(stream: str, answers: Mapping[str, Answer]) -> None:
    click.echo(f"stream {stream}, leader {leader_of(answers) or '(none)'}")
    click.echo(
        f"{'node':<12} {'version':<9} {'role':<10} {'term':>5} {'commit':>8} {'seq':>8} "
        f"{'position':<22} {'digest':<18} {'disk':>6}  lag per input"
    )
    for n in answers.values():
        if isinstance(n, Unreachable):
            click.echo(f"{n.name:<12} unreachable: {n.error}")
            continue
        lag = ", ".join(f"{k}={v.lag_bytes}" for k, v in n.inputs.items()) or "-"
        digest = (n.digest or "?")[:16]
        click.echo(
            f"{n.name:<12} {n.software or '?':<9} {n.role:<10} {n.term:>5} {n.commit_index:>8} "
            f"{n.merged_seq:>8} {Position(n.merged_position).format():<22} {digest:<18} "
            f"{n.disk_used_percent:>5}%  {lag}"
        )
        if n.halted:
            click.echo(f"{'':<12} merger halted: {n.halted}")
        if n.unfit_to_lead:
            click.echo(f"{'':<12} unfit to lead (stands for no election): {n.unfit_to_lead}")
        if n.not_voting:
            click.echo(f"{'':<12} not voting yet: {n.not_voting}")
        for name, hold in n.holds.items():
            where = Position(hold["position"]).format()
            line = f"{'':<12} hold {name}: at {where}, {hold['behind_bytes'] or 0} bytes behind"
            click.echo(line + (f"; GAP: {hold['gap']}" if hold.get("gap") else ""))
    _print_leases(answers)


def _print_leases(answers: Mapping[str, Answer]) -> None:
    """Each lease as the leader committed it (else as any node that answered has it)."""
    nodes = [a for a in answers.values() if isinstance(a, NodeStatus)]
    nodes.sort(key=lambda n: (not n.is_leader, -n.commit_index))
    for name, lease in (nodes[0].leases if nodes else {}).items():
        left = lease.get("remaining_s") or 0
        holder = lease.get("holder") if left > 0 else None
        where = f"{holder}, {left:.1f} s left" if holder else "expired, nobody holds it"
        click.echo(f"lease {name}: {where} ({lease.get('grants', 0)} grants so far)")
