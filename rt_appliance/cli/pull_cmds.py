"""``rt pull-client``: a subscriber host's copy of the merged log.

A node's pull server runs inside ``rt node`` (:mod:`rt_appliance.node.process`)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG, metrics_port_option
from rt_appliance.config import load_config
from rt_appliance.daemons.runner import run_daemon, serve_metrics
from rt_appliance.replicate.pull_client import ClientMetrics, PullClient

log = logging.getLogger(__name__)


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
    client asks a node for the topology, prefers the leader (subscriber.prefer),
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
