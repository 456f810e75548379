"""A node cut off by the network for a while catches up when the link heals (as root)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_lab.testing import server_alone
from rt_lab.testing.checkers import log_files, same_log_files
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config
from rt_lab.testing.netns import NetnsHost
from tests.replication.test_push import publish

pytestmark = [pytest.mark.fault, pytest.mark.root]


@pytest.fixture
def netns_host() -> Iterator[NetnsHost]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for network namespaces")
    host = NetnsHost(1)
    yield host
    host.close()


def test_cut_link_then_heal_node_catches_up(tmp_path: Path, netns_host: NetnsHost) -> None:
    nodes = [
        {"name": "rt-1", "host": netns_host.address},
        {"name": "rt-2", "host": "127.0.0.2"},
        {"name": "rt-3", "host": "127.0.0.3"},
    ]
    path = write_local_config(
        tmp_path,
        extra={
            "nodes": nodes,
            "replication": {"delete_acked": False, "ack_timeout_ms": 1000, "reconnect_max_ms": 500},
        },
    )
    config = load_config(path)
    daemons = []
    try:
        for node in config.nodes:
            prefix = netns_host.prefix if node.name == "rt-1" else None
            argv = server_alone.command("push", path, node.name)
            daemons.append(
                Daemon(
                    f"push-server-{node.name}", [], tmp_path / "logs", prefix, program=argv
                ).start()
            )
        root = config.data_dir_of(config.publisher("pub-1")) / "pub"
        source = root / "trades.pub-1"
        replicas = {n.name: config.data_dir_of(n) / "in" / "trades.pub-1" for n in config.nodes}
        publish(root, 5)
        args = ["push-client", "--config", str(path), "--host", "pub-1", "--metrics-port", "0"]
        client = Daemon("push-client", args, tmp_path / "logs").start()
        daemons.append(client)
        wait_until(
            lambda: all(same_log_files(log_files(source), r) for r in replicas.values()),
            30,
            "first replication",
        )
        netns_host.cut()
        publish(root, 30, first=100_000)
        expected = log_files(source)
        wait_until(
            lambda: (
                same_log_files(expected, replicas["rt-2"])
                and same_log_files(expected, replicas["rt-3"])
            ),
            30,
            "the connected nodes to keep up",
        )
        wait_until(
            lambda: "acknowledged nothing" in client.log() or "cannot connect" in client.log(),
            30,
            "the client to notice the cut",
        )
        assert not same_log_files(expected, replicas["rt-1"]), (
            "rt-1 was cut off: it cannot have the new data"
        )
        netns_host.heal()
        wait_until(
            lambda: same_log_files(expected, replicas["rt-1"]), 60, "rt-1 to catch up after healing"
        )
    finally:
        for daemon in daemons:
            daemon.stop()
