"""``rt push-server`` and ``rt push-client``: push replication daemons."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from rt_appliance.config import load_config
from rt_appliance.daemons.runner import run_daemon
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.push_server import PushServer

_CONFIG = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("/etc/rt/rt.yaml"),
    show_default=True,
    help="The stream's configuration file.",
)
_METRICS = click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Prometheus port (0: none)  [default: from the configuration]",
)


@click.command("push-server")
@_CONFIG
@click.option("--node", required=True, help="Name of this RT node in the configuration.")
@_METRICS
def push_server(config_path: Path, node: str, metrics_port: int | None) -> None:
    """Receive publisher directories into DATA_DIR/in/ on this node (port `push`).

    Accepts mutually authenticated connections from publisher hosts, resumes
    each directory where its replica ends, accepts only whole CRC-valid records
    that continue it exactly, syncs them and acknowledges. Runs until SIGTERM.
    """
    config = load_config(config_path)
    server = PushServer(config, node, metrics_port)

    async def main(stop: asyncio.Event) -> None:
        await server.run(stop)

    run_daemon(f"push-server {node}", main)


@click.command("push-client")
@_CONFIG
@click.option(
    "--host", "host_name", required=True, help="Name of this publisher host in the configuration."
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="Only this topic (repeat)  [default: the host's topics]",
)
@_METRICS
def push_client(
    config_path: Path, host_name: str, topics: tuple[str, ...], metrics_port: int | None
) -> None:
    """Stream this host's publisher directories (DATA_DIR/pub/<topic>.<host>) to every node.

    Holds one connection per node (directly, or through `load_balancer`),
    follows the files with inotify, reconnects with capped jittered backoff and
    deletes rolled files once every node has acknowledged them. Runs until SIGTERM.
    """
    config = load_config(config_path)
    client = PushClient(config, host_name, list(topics) or None, metrics_port)
    run_daemon(f"push-client {host_name}", client.run)
