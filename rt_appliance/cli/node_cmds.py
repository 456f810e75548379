"""``rt node``: an RT node as one process."""

from __future__ import annotations

from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG, metrics_port_option
from rt_appliance.config import load_config
from rt_appliance.daemons.runner import run_daemon


@click.command("node")
@CONFIG
@click.option("--node", required=True, help="Name of this RT node (as in the config's nodes).")
@metrics_port_option("sequencer_metrics")
def node(config_path: Path, node: str, metrics_port: int | None) -> None:
    """Run this RT node: push server, sequencer and pull server in one process.

    Receives publisher directories into <data_dir>/in/ (ports.push), merges every
    input into <data_dir>/merged/ agreed through raft with the other nodes
    (ports.raft, ports.control), and serves the merged log to subscriber hosts
    and nodes (ports.pull), all with mutual TLS. Inside the process a synced
    input wakes the sequencer and a merged range wakes the pull connections at
    once. One Prometheus endpoint (ports.sequencer_metrics) carries every
    metric of the three. Runs until SIGTERM or SIGINT. See docs/SEQUENCER.md.
    """
    from rt_appliance.node.process import Node

    config = load_config(config_path)
    process = Node(config, node, metrics_port)
    run_daemon(f"node {node}", process.run, process)
