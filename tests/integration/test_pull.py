"""Pull replication with real processes and real mutual TLS: three nodes' pull servers
(each alone in its process, ``rt_lab.testing.server_alone``), each serving an
identical "merged" directory, and `rt pull-client`s keeping local copies."""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import signal
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from rt_appliance import Publisher, Subscriber
from rt_appliance.config import StreamConfig, TlsConfig, load_config
from rt_appliance.errors import PeerRejectedError, TransportError
from rt_appliance.position import Position
from rt_appliance.replicate.topology import Endpoint, candidate_order
from rt_appliance.transport.messages import FrameType, decode_control
from rt_appliance.transport.session import connect
from rt_appliance.transport.tls import client_context
from rt_lab.testing import server_alone
from rt_lab.testing.checkers import log_files, same_log_files
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config
from tests.integration.test_merged_log import build_merged

pytestmark = pytest.mark.integration

NODES = ("rt-1", "rt-2", "rt-3")
ROLL_BYTES = 64 << 10
SUBS = [f"sub-{i}" for i in range(1, 13)]


def free_port(*hosts: str) -> int:
    """A TCP port nobody listens on at any of ``hosts``."""
    while True:
        port = random.randint(20_000, 60_000)
        try:
            for host in hosts:
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port


def mirror(source: Path, target: Path) -> None:
    """Make ``target`` hold ``source``'s stream files as a merger would: append only,
    whole new files appear by rename."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("log.*")):
        data, dest = path.read_bytes(), target / path.name
        if dest.exists():
            with open(dest, "ab") as f:
                f.write(data[dest.stat().st_size :])
        else:
            temporary = target / f".mirror-{path.name}"
            temporary.write_bytes(data)
            os.rename(temporary, dest)


@dataclass
class Cluster:
    work: Path
    config_path: Path
    config: StreamConfig
    publisher: Publisher
    daemons: dict[str, Daemon]
    metrics_ports: dict[str, int]

    @property
    def published(self) -> Path:
        return self.publisher.directory

    def source(self, node: str) -> Path:
        return self.work / "data" / node / "merged"

    def copy(self, subscriber: str) -> Path:
        return self.work / "data" / subscriber / "sub" / "teststream"

    def publish(self, count: int, tag: str) -> None:
        for i in range(count):
            self.publisher.publish(f"{tag}-{i:06d} ".encode() + b"p" * (i % 90))
        self.publisher.flush()
        for node in NODES:
            mirror(self.published, self.source(node))

    def start(self, name: str, *args: str, program: list[str] | None = None) -> Daemon:
        port = self.metrics_ports[name] = free_port(self._address(name))
        daemon = Daemon(
            name, [*args, "--metrics-port", str(port)], self.work / "logs", program=program
        )
        self.daemons[name] = daemon
        return daemon.start()

    def server(self, node: str) -> Daemon:
        alone = server_alone.command("pull", self.config_path, node, metrics_port=None)
        return self.start(node, program=alone)

    def client(self, host: str) -> Daemon:
        return self.start(host, "pull-client", "--config", str(self.config_path), "--host", host)

    def metrics(self, name: str) -> str:
        url = f"http://{self._address(name)}:{self.metrics_ports[name]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def _address(self, name: str) -> str:
        return next(h.host for h in self.config.all_hosts() if h.name == name)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    extra: dict[str, object] = {
        "subscribers": [
            {"name": "sub-1", "host": "127.0.2.1"},
            {"name": "sub-2", "host": "127.0.2.2", "keep_pruned": True},
        ],
        "ports": {"pull": free_port("127.0.0.1", "127.0.0.2", "127.0.0.3")},
        "replication": {"reconnect_initial_ms": 50, "reconnect_max_ms": 500},
    }
    config_path = write_local_config(tmp_path, nodes=3, extra=extra)
    publisher = Publisher(tmp_path / "published", "trades", "pub-1", roll_bytes=ROLL_BYTES)
    c = Cluster(tmp_path, config_path, load_config(config_path), publisher, {}, {})
    try:
        yield c
    finally:
        for daemon in reversed(c.daemons.values()):
            daemon.stop()
        publisher.close()


def identical(c: Cluster, subscriber: str, pruned: frozenset[str] = frozenset()) -> bool:
    expected = {k: v for k, v in log_files(c.published).items() if k not in pruned}
    return same_log_files(expected, c.copy(subscriber))  # a file deleted mid-read: not yet


def wait_identical(c: Cluster, what: str, *subs: str, pruned: frozenset[str] = frozenset()) -> None:
    for sub in subs:
        wait_until(partial(identical, c, sub, pruned), 20, f"{sub}: {what}")


def connected_node(daemon: Daemon) -> str | None:
    found = re.findall(r"pulling from (rt-\d)", daemon.log())
    return found[-1] if found else None


def test_copy_follows_fails_over_and_prunes(cluster: Cluster) -> None:
    c = cluster
    c.publish(3000, "first")
    assert len(log_files(c.published)) >= 4
    for node in NODES:
        c.server(node)
    sub1, sub2 = c.client("sub-1"), c.client("sub-2")
    wait_identical(c, "copy to be identical", "sub-1", "sub-2")

    # New data on the nodes is followed.
    c.publish(1500, "second")
    wait_identical(c, "to follow new data", "sub-1", "sub-2")

    # kill -9 the node sub-1 pulls from (while it may be sending): sub-1 fails over and
    # continues from the same position.
    first = connected_node(sub1)
    assert first in NODES
    c.publish(2000, "third")
    c.daemons[first].kill(signal.SIGKILL)
    c.publish(500, "after-kill")
    wait_until(lambda: connected_node(sub1) not in (None, first), 20, "sub-1 to fail over")
    wait_identical(c, "identical after fail-over", "sub-1", "sub-2")
    payloads = [m.payload for m in Subscriber(c.copy("sub-1")).read(Position.ZERO)]
    assert len(payloads) == 7000 and len(set(payloads)) == 7000  # no gap, no duplicate
    assert payloads[0].startswith(b"first-000000") and payloads[-1].startswith(b"after-kill-000499")

    # The archiver prunes the two oldest files on every node: sub-1 deletes them, sub-2 keeps.
    pruned = frozenset(list(log_files(c.published))[:2])
    for node in NODES:
        for name in pruned:
            (c.source(node) / name).unlink()
    wait_identical(c, "pruned files deleted", "sub-1", pruned=pruned)
    wait_until(lambda: "keep_pruned" in sub2.log(), 20, "sub-2 to hear of the prune")
    assert identical(c, "sub-2")
    c.publish(500, "fourth")
    wait_identical(c, "following after pruning", "sub-1", pruned=pruned)

    # What the logs and the metrics say.
    survivor = connected_node(sub1)
    assert survivor is not None
    server_log = c.daemons[survivor].log()
    assert f"sub-1 pulls {c.source(survivor)} from position" in server_log
    assert re.search(r"rt_pull_server_sent_bytes_total [1-9]", c.metrics(survivor))
    client_metrics = c.metrics("sub-1")
    assert re.search(r"rt_pull_client_received_bytes_total [1-9]", client_metrics)
    assert re.search(r"rt_pull_client_reconnects_total [1-9]", client_metrics)
    assert re.search(r"rt_pull_client_pruned_files_total 2\.0", client_metrics)

    # A clean stop, and a restart resumes where the copy ends.
    sub1.stop()
    assert sub1.proc is not None and sub1.proc.returncode == 0
    assert "stopped; the copy ends at" in sub1.log()
    c.publish(300, "fifth")
    c.client("sub-1")
    wait_identical(c, "caught up after a restart", "sub-1", pruned=pruned)


async def _metadata_and_refusals(c: Cluster, foreign_tls: TlsConfig) -> None:
    config, port = c.config, c.config.ports.pull

    async def client(name: str, tls: TlsConfig) -> None:
        conn, node = await connect(
            "127.0.0.1", port, client_context(tls, name), config, name, "pull", "rt-1"
        )
        assert node == "rt-1"
        try:
            await conn.send(FrameType.METADATA, {})
            topology = await conn.receive_control(FrameType.TOPOLOGY)
            assert topology == {
                "stream": "teststream",
                "nodes": [
                    {"name": f"rt-{i}", "host": f"127.0.0.{i}", "port": port} for i in (1, 2, 3)
                ],
                "leader": None,
            }
            # A pruned position: an ERROR that names the oldest available position.
            await conn.send(FrameType.PULL, {"position": int(Position.of(1, 0, 100))})
            frame_type, body = await conn.receive()
            assert frame_type == FrameType.ERROR
            error = decode_control(frame_type, body)
            assert error["oldest"] == int(Position.of(1, 1, 0)) and not error["retryable"]
            assert str(Position.of(1, 1, 0)) in error["message"]
        finally:
            await conn.close()

    await client("sub-1", config.tls)
    with pytest.raises(PeerRejectedError, match="publisher"):
        await client("pub-1", config.tls)  # a publisher's certificate cannot pull
    with pytest.raises(TransportError):
        await client("sub-1", foreign_tls)  # a certificate from another CA


def test_metadata_pruned_position_and_refused_certificates(cluster: Cluster) -> None:
    c = cluster
    c.publish(2000, "m")
    (c.source("rt-1") / "log.1.0").unlink()
    server = c.server("rt-1")
    # A subscriber certificate from another CA, next to this stream's CA certificate.
    other = write_local_config(c.work / "other", nodes=3, subscribers=["sub-1"])
    foreign = c.work / "foreign-tls"
    foreign.mkdir()
    shutil.copy(c.work / "tls" / "ca.crt", foreign / "ca.crt")
    for suffix in (".crt", ".key"):
        shutil.copy(other.parent / "tls" / f"sub-1{suffix}", foreign / f"sub-1{suffix}")
    wait_until(lambda: "serves" in server.log(), 10, "rt-1 to listen")
    asyncio.run(_metadata_and_refusals(c, TlsConfig(dir=str(foreign))))
    wait_until(lambda: server.log().count("refused a pull connection") >= 2, 10, "two refusals")
    assert "pruned on rt-1; the oldest available is" in server.log()
    assert re.search(r"rt_pull_server_rejected_total 2\.0", c.metrics("rt-1"))


def test_merged_log_resumed_at_a_range_boundary(cluster: Cluster) -> None:
    """A real merged log: a range record before each run of records. The copy already
    ends where the first range ends, so the node resumes right at a range record."""
    c = cluster
    merged, _ = build_merged(c.work / "merged-log")
    mirror(merged, c.source("rt-1"))
    messages = list(Subscriber(merged).read(Position.ZERO))
    end = messages[4].next_position  # the first range holds 5 messages
    assert messages[5].position > end  # the second range's record lies in between
    name = f"log.{end.session}.{end.roll}"
    c.copy("sub-1").mkdir(parents=True)
    (c.copy("sub-1") / name).write_bytes((merged / name).read_bytes()[: end.offset])
    server, sub = c.server("rt-1"), c.client("sub-1")
    wait_until(lambda: log_files(c.copy("sub-1")) == log_files(merged), 20, "an identical copy")
    assert f"pulling from rt-1 (127.0.0.1:{c.config.ports.pull}) at position {end} " in sub.log()
    assert "cannot serve" not in server.log()


def test_candidate_order_is_stable_spread_and_avoids_the_leader() -> None:
    nodes = [Endpoint(f"rt-{i}", f"127.0.0.{i}", 5001) for i in (3, 1, 2)]
    orders = {s: [e.name for e in candidate_order(nodes, s, None, "follower")] for s in SUBS}
    assert all(sorted(o) == ["rt-1", "rt-2", "rt-3"] for o in orders.values())
    assert len({o[0] for o in orders.values()}) == 3  # different hosts start at different nodes
    assert orders["sub-1"] == [e.name for e in candidate_order(nodes[::-1], "sub-1", None, "any")]
    assert candidate_order(nodes, "sub-1", "rt-2", "follower")[-1].name == "rt-2"
    assert candidate_order(nodes, "sub-1", "rt-2", "leader")[0].name == "rt-2"
