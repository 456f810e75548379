"""Three RT nodes, each a container booting a real systemd on a network of its own.

Each node is set up as docs/OPERATIONS.md says (the .deb, its certificate in
/etc/rt/tls, one /etc/rt/rt.yaml, `rt apply`, `systemctl enable --now`); the nodes
reach each other over veth links through this machine. A publisher host and a
subscriber host (processes here, outside the containers) exchange messages through
them. Then `systemctl stop rt-sequencer` on the leader: another node leads, and
nothing is lost, duplicated or reordered; every merged log ends byte-identical.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from rt_appliance.certs import init_for_config
from rt_appliance.config import StreamConfig, load_config
from rt_appliance.publish import Publisher
from rt_lab.testing.cluster import Daemon
from rt_lab.testing.netns import NetnsHost, enable_forwarding, restore_forwarding
from rt_lab.testing.nspawn import Container, nspawn_missing
from tests.appliance.test_container import DIST, NODE_UNITS, package
from tests.helpers import payloads, read_all, snapshot

pytestmark = [
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.skipif(nspawn_missing() is not None, reason=nspawn_missing() or ""),
]

NODES = ["rt-1", "rt-2", "rt-3"]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.25)


class Cluster:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.hosts: list[NetnsHost] = []
        self.containers: dict[str, Container] = {}
        self.daemons: list[Daemon] = []
        self.config_path = work / "rt.yaml"
        self.config: StreamConfig | None = None

    def write_config(self) -> StreamConfig:
        edge = {"data_dir": str(self.work / "{name}"), "tls_dir": str(self.work / "tls")}
        doc = {
            "stream": "cluster",
            "nodes": [
                {"name": n, "host": h.address} for n, h in zip(NODES, self.hosts, strict=True)
            ],
            "publishers": [{"name": "pub-1", "host": "127.0.0.1", "topics": ["ticks"], **edge}],
            "subscribers": [{"name": "sub-1", "host": "127.0.0.1", **edge}],
        }
        self.config_path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.config = load_config(self.config_path)
        init_for_config(self.config, self.work / "tls", days=30, force=False)
        return self.config

    def set_up_node(self, name: str, host: NetnsHost) -> Container:
        node = Container(name, self.work / "logs", binds={DIST: "/mnt/dist"}, netns=host.name)
        self.containers[name] = node
        node.boot()
        node.run("dpkg", "-i", "/mnt/dist/rt-appliance_0.1.0-1_amd64.deb")
        (node.root / "etc/rt/rt.yaml").write_bytes(self.config_path.read_bytes())
        tls = self.work / "tls"
        for file, mode in (("ca.crt", "0644"), (f"{name}.crt", "0644"), (f"{name}.key", "0640")):
            (node.root / "root" / file).write_bytes((tls / file).read_bytes())
            node.run("install", "-m", mode, "-g", "rt", f"/root/{file}", "/etc/rt/tls/")
        node.run("rt", "apply", "--host", name)
        return node

    def merged(self, name: str) -> dict[str, bytes]:
        return snapshot(self.containers[name].root / "var/lib/rt/merged")

    def status(self, name: str) -> str:
        return self.containers[name].unit_property("rt-sequencer.service", "StatusText")

    def leader(self, among: list[str]) -> str | None:
        leaders = [n for n in among if self.status(n).startswith("leader")]
        return leaders[0] if len(leaders) == 1 else None

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.stop()
        for container in self.containers.values():
            container.stop()
        for host in self.hosts:
            host.close()


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    package(1)
    forwarding = enable_forwarding()
    made = Cluster(tmp_path)
    try:
        for tag in (31, 32, 33):
            host = NetnsHost(tag)
            made.hosts.append(host)
            host.route_via_host()
        yield made
    finally:
        with contextlib.suppress(Exception):
            for name, container in made.containers.items():
                log = container.run("journalctl", "--no-pager", "-u", "rt-*", check=False)
                (tmp_path / f"journal-{name}.log").write_text(log.stdout)
        made.close()
        restore_forwarding(forwarding)


def test_three_containers_carry_a_stream_and_survive_the_leader_stopping(
    cluster: Cluster,
) -> None:
    config = cluster.write_config()
    for name, host in zip(NODES, cluster.hosts, strict=True):
        cluster.set_up_node(name, host)
    for name in NODES:
        cluster.containers[name].run("systemctl", "enable", "--now", *NODE_UNITS, timeout_s=200)
    wait_for(lambda: cluster.leader(NODES) is not None, "a leader among the three")

    args = ["--config", str(cluster.config_path), "--metrics-port", "0"]
    logs = cluster.work / "logs"
    for daemon in (
        Daemon("push-client", ["push-client", "--host", "pub-1", *args], logs),
        Daemon("pull-client", ["pull-client", "--host", "sub-1", *args], logs),
    ):
        cluster.daemons.append(daemon.start())
    copy = config.data_dir_of(config.subscriber("sub-1")) / "sub" / "cluster"
    pub_root = config.data_dir_of(config.publisher("pub-1")) / "pub"

    sent: list[bytes] = []

    def publish(count: int) -> None:
        with Publisher(pub_root, "ticks", "pub-1", fsync="always") as publisher:
            for _ in range(count):
                payload = f"tick-{len(sent)}".encode()
                publisher.publish(payload)
                sent.append(payload)

    def delivered() -> list[bytes]:
        return payloads(read_all(copy)) if copy.exists() else []

    publish(200)
    wait_for(lambda: delivered() == sent, "the subscriber has the first 200 messages in order")

    # Stop the leader's sequencer as an operator would; another node takes over.
    old = cluster.leader(NODES)
    assert old is not None
    cluster.containers[old].run("systemctl", "stop", "rt-sequencer")
    rest = [n for n in NODES if n != old]
    wait_for(lambda: cluster.leader(rest) is not None, "a new leader among the other two")
    publish(200)
    wait_for(lambda: delivered() == sent, "all 400 messages, once each, in order")

    # The old leader comes back and catches up; every merged log is the same bytes.
    cluster.containers[old].run("systemctl", "start", "rt-sequencer", timeout_s=200)
    wait_for(
        lambda: len({repr(sorted(cluster.merged(n).items())) for n in NODES}) == 1,
        "byte-identical merged logs on all three nodes",
    )
    assert delivered() == sent
    assert len(set(sent)) == 400
    for name in NODES:
        for unit in NODE_UNITS:
            assert cluster.containers[name].unit_property(unit, "ActiveState") == "active"
