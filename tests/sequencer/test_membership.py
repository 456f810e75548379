"""Growing a stream from 3 to 5 nodes and shrinking it back, while publishers publish,
as docs/OPERATIONS.md ("Growing and shrinking a stream") says: a short planned pause of
merging, nothing acknowledged lost, the merged logs byte-identical at the end.

Grow: stop the three nodes, give every host the 5-node configuration, start all five.
The two new nodes start with no raft state: they join without voting until they hold
what the old three had committed, so no majority of the five can form without the old
nodes' entries. Shrink: stop the two nodes leaving; wait until the three staying hold
everything committed (with two of five gone every commit needs all three); stop the
three, give every host the 3-node configuration, start them."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from rt_lab.testing.checkers import assert_clean, check_merged
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream
from tests.sequencer.conftest import SMALL, Feed
from tests.sequencer.test_cluster import TWO, committed_seq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OLD, NEW = ["rt-1", "rt-2", "rt-3"], ["rt-4", "rt-5"]
CLIENTS = {"pub-1": "push-client", "pub-2": "push-client", "sub-1": "pull-client"}


def _commit_index(stream: LocalStream, node: str) -> int:
    for n in stream.status()["nodes"]:
        if n["name"] == node and n["reachable"]:
            return int(n["commit_index"])
    return -1


def _point(stream: LocalStream, hosts: list[str], config: Path) -> None:
    """The next start of ``hosts``' daemons reads ``config`` (as copying a new rt.yaml
    to each host would)."""
    for host in hosts:
        if host in CLIENTS:
            daemon = stream._daemon(CLIENTS[host], host)
        else:
            daemon = stream.node_daemon(host)
        daemon.args[daemon.args.index("--config") + 1] = str(config)


def _restart_clients(stream: LocalStream, config: Path) -> None:
    for host, role in CLIENTS.items():
        stream._daemon(role, host).stop()
    _point(stream, list(CLIENTS), config)
    for host, role in CLIENTS.items():
        stream._daemon(role, host).start()


def _stop_nodes(stream: LocalStream, nodes: list[str]) -> None:
    for node in nodes:
        stream.node_daemon(node).send(signal.SIGTERM)
    for node in nodes:
        proc = stream.node_daemon(node).proc
        assert proc is not None and proc.wait(timeout=20) == 0


def test_grow_from_three_to_five_nodes_and_back(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream: LocalStream = local_stream(nodes=5, publishers=TWO, extra=SMALL)
    five = stream.config_path
    doc: dict[str, Any] = yaml.safe_load(five.read_text())
    three = five.with_name("rt-3-nodes.yaml")
    three.write_text(yaml.safe_dump({**doc, "nodes": doc["nodes"][:3]}, sort_keys=False))
    everyone = [*OLD, *NEW, *CLIENTS]
    _point(stream, everyone, three)
    for node in OLD:
        stream.start_node(node)
    for host, role in CLIENTS.items():
        stream._daemon(role, host).start()
    feeds = [
        Feed(stream, "pub-1", "trades").start(300),
        Feed(stream, "pub-2", "quotes").start(300),
    ]
    leader = stream.wait_leader()
    wait_until(lambda: committed_seq(stream, leader) > 20, 30, "merging on three nodes")

    # Grow: stop the three, every host gets the 5-node configuration, start all five.
    _stop_nodes(stream, OLD)
    _point(stream, everyone, five)
    for node in [*OLD, *NEW]:
        stream.start_node(node)
    _restart_clients(stream, five)
    leader = stream.wait_leader(30.0)
    assert leader in OLD  # the new nodes join, they are not elected
    before = committed_seq(stream, leader)
    for node in NEW:
        log_path = stream.log_dir / f"sequencer-{node}.log"
        wait_until(lambda p=log_path: "caught up to commit" in p.read_text(), 60, f"{node} to join")
        assert "joining a stream with a history" in log_path.read_text()
    wait_until(
        lambda: all(committed_seq(stream, n) > before for n in NEW), 60, "the new nodes merging"
    )

    # Shrink: the leaving two stop; the staying three hold every commit; restart on three.
    _stop_nodes(stream, NEW)
    target = max(_commit_index(stream, n) for n in OLD)
    wait_until(
        lambda: min(_commit_index(stream, n) for n in OLD) >= target, 30, "the three in step"
    )
    _stop_nodes(stream, OLD)
    _point(stream, everyone, three)
    for node in OLD:
        stream.start_node(node)
    _restart_clients(stream, three)
    leader = stream.wait_leader(30.0)
    before = committed_seq(stream, leader)
    wait_until(lambda: committed_seq(stream, leader) > before + 5, 30, "merging on three again")

    for f in feeds:
        f.stop()
    expected = {f.source: list(f.ids) for f in feeds}
    report = check_merged(
        stream.merged_dirs(OLD),
        expected,
        timeout_s=60,
        copies={"sub-1": stream.subscriber_dir("sub-1")},
        key="id",
    )
    assert_clean(report, stream.logs())
