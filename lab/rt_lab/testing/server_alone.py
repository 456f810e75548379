"""One of a node's servers on its own, as a process: for tests of replication alone.

An RT node runs its push server and pull server inside ``rt node``, with its
sequencer. Tests of replication alone (fail-over between pull servers, a push server
on a full disk, refusals) run just the server they test, against directories they
write themselves, with no sequencer and no raft::

    python -m rt_lab.testing.server_alone push --config rt.yaml --node rt-1
    python -m rt_lab.testing.server_alone pull --config rt.yaml --node rt-1 \\
        --metrics-port 0

Its metrics are on ``--metrics-port``, by default the node's (``ports.sequencer_metrics``,
where ``rt replication status`` looks), and it tells systemd it is ready as ``rt node``
does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from rt_appliance.config import load_config
from rt_appliance.daemons.runner import run_daemon, serve_metrics
from rt_appliance.replicate.pull_server import PullServer, ServerMetrics
from rt_appliance.replicate.push_server import PushServer

__all__ = ["ROLES", "command", "main"]

ROLES = ("push", "pull")


def command(role: str, config: Path, node: str, metrics_port: int | None = 0) -> list[str]:
    """The command line that runs ``role``'s server of ``node`` alone (``metrics_port``
    None: the node's metrics port)."""
    argv = [sys.executable, "-m", "rt_lab.testing.server_alone", role]
    argv += ["--config", str(config), "--node", node]
    return argv if metrics_port is None else [*argv, "--metrics-port", str(metrics_port)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--config", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--metrics-port", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(  # as rt --log-level info logs
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = load_config(args.config)
    host = config.node(args.node).host
    port = config.ports.sequencer_metrics if args.metrics_port is None else args.metrics_port
    if args.role == "push":
        push = PushServer(config, args.node)
        serve_metrics(push.metrics.registry, host, port)
        run_daemon(f"push server {args.node}", push.run, push)
        return
    metrics = ServerMetrics()
    pull = PullServer(config, args.node, metrics)

    async def serve() -> None:
        await pull.start()
        try:
            await asyncio.Event().wait()
        finally:
            await pull.stop()

    serve_metrics(metrics.registry, host, port)
    run_daemon(f"pull server {args.node}", serve, pull)


if __name__ == "__main__":
    main()
