"""``rt push-client``: the push replication daemon of a publisher host.

A node's push server runs inside ``rt node`` (:mod:`rt_appliance.node.process`)."""

from __future__ import annotations

from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG, metrics_port_option
from rt_appliance.config import load_config
from rt_appliance.daemons.runner import run_daemon, serve_metrics
from rt_appliance.replicate.push_client import PushClient


@click.command("push-client")
@CONFIG
@click.option(
    "--host", "host_name", required=True, help="Name of this publisher host in the configuration."
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="Only this topic (repeat)  [default: the host's topics]",
)
@metrics_port_option("push_client_metrics")
def push_client(
    config_path: Path, host_name: str, topics: tuple[str, ...], metrics_port: int | None
) -> None:
    """Stream this host's publisher directories (DATA_DIR/pub/<topic>.<host>) to every node.

    Holds one connection per node (directly, or through `load_balancer`),
    follows the files with inotify, reconnects with capped jittered backoff and
    deletes rolled files once every node has acknowledged them. Runs until SIGTERM.
    """
    config = load_config(config_path)
    client = PushClient(config, host_name, list(topics) or None)
    port = config.ports.push_client_metrics if metrics_port is None else metrics_port
    serve_metrics(client.metrics.registry, config.publisher(host_name).host, port)
    run_daemon(f"push-client {host_name}", client.run, client)
