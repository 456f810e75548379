"""``rt pull-server`` and ``rt pull-client``: pull replication of the merged log."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG, metrics_port_option
from rt_appliance.config import load_config
from rt_appliance.daemons.runner import run_daemon, serve_metrics
from rt_appliance.replicate.pull_client import ClientMetrics, PullClient
from rt_appliance.replicate.pull_server import PullServer, ServerMetrics

log = logging.getLogger(__name__)


@click.command("pull-server")
@CONFIG
@click.option("--node", required=True, help="Name of this RT node (as in the config's nodes).")
@metrics_port_option("pull_server_metrics")
def pull_server(config_path: Path, node: str, metrics_port: int | None) -> None:
    """Serve this node's merged log to subscriber hosts (and other nodes).

    Listens with mutual TLS on the node's host and ports.pull (5001). Serves
    replication.pull_source ('{name}' is replaced by the node name), by default
    <data_dir>/merged. A client that sends PULL {position} gets every record
    from there on, then new records as the merged log grows (inotify), and a
    PRUNE notice whenever the oldest file changes (the archiver deleted files).
    A client whose position was pruned gets an error naming the oldest
    available position. METADATA returns the topology (nodes, advertised
    addresses, leader). Hosts whose certificate names a subscriber host or a
    node may connect; others are refused and counted. Runs until SIGTERM or
    SIGINT. See docs/REPLICATION_PULL.md.
    """
    config = load_config(config_path)
    host = config.node(node).host
    metrics = ServerMetrics()
    server = PullServer(config, node, metrics)
    port = config.ports.pull_server_metrics if metrics_port is None else metrics_port

    async def main() -> None:
        await server.start()
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    serve_metrics(metrics.registry, host, port)
    run_daemon(f"pull-server {node}", main, server)


@click.command("pull-client")
@CONFIG
@click.option(
    "--host", "host_name", required=True, help="Name of this subscriber host (as in the config)."
)
@metrics_port_option("pull_client_metrics")
def pull_client(config_path: Path, host_name: str, metrics_port: int | None) -> None:
    """Keep a local copy of the merged log on a subscriber host.

    The copy is <data_dir>/sub/<stream> of the subscriber host, a byte-identical
    prefix of every node's merged log; read it with `rt subscribe --dir`. The
    client asks a node for the topology, prefers a follower (subscriber.prefer),
    and spreads subscriber hosts over the nodes. It resumes from where the copy
    ends, so a restart or a fail-over to another node neither loses nor repeats
    bytes. When a connection fails it retries the next node after a capped,
    jittered backoff (replication.reconnect_initial_ms .. reconnect_max_ms).
    Files the nodes pruned are deleted here too, unless keep_pruned is true.
    Durability follows replication.fsync. Runs until SIGTERM or SIGINT; exits 1
    if every node has pruned the position the copy ends at.
    """
    config = load_config(config_path)
    host = config.subscriber(host_name).host
    metrics = ClientMetrics()
    client = PullClient(config, host_name, metrics)
    port = config.ports.pull_client_metrics if metrics_port is None else metrics_port
    try:
        serve_metrics(metrics.registry, host, port)
    except BaseException:
        client.replica.close()
        raise
    run_daemon(f"pull-client {host_name}", client.run, client)
