"""Fixtures for replication tests: a 3-node stream on 127.0.0.x with certificates."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rt_appliance.config import StreamConfig, load_config
from rt_lab.testing import server_alone
from rt_lab.testing.cluster import Daemon, write_local_config


@dataclass
class Stream:
    work: Path
    config_path: Path
    config: StreamConfig
    daemons: list[Daemon] = field(default_factory=list)

    def push_server(self, node: str, metrics_port: int | None = 0) -> Daemon:
        """Node ``node``'s push server alone (``metrics_port`` None: the node's port)."""
        argv = server_alone.command("push", self.config_path, node, metrics_port)
        return self.start(Daemon(f"push-server-{node}", [], self.work / "logs", program=argv))

    def pull_server(self, node: str, metrics_port: int | None = 0) -> Daemon:
        """Node ``node``'s pull server alone (``metrics_port`` None: the node's port)."""
        argv = server_alone.command("pull", self.config_path, node, metrics_port)
        return self.start(Daemon(f"pull-server-{node}", [], self.work / "logs", program=argv))

    def push_client(self, host: str = "pub-1", metrics_port: int | None = 0) -> Daemon:
        """``metrics_port`` None: the configuration's port."""
        args = ["push-client", "--config", str(self.config_path), "--host", host]
        if metrics_port is not None:
            args += ["--metrics-port", str(metrics_port)]
        return self.start(Daemon(f"push-client-{host}", args, self.work / "logs"))

    def start(self, daemon: Daemon) -> Daemon:
        self.daemons.append(daemon)
        return daemon.start()

    def pub_root(self, host: str = "pub-1") -> Path:
        return self.config.data_dir_of(self.config.publisher(host)) / "pub"

    def replica(self, node: str, dir_name: str = "trades.pub-1") -> Path:
        return self.config.data_dir_of(self.config.node(node)) / "in" / dir_name

    def logs(self) -> str:
        return "\n".join(f"--- {d.name}\n{d.log()[-3000:]}" for d in self.daemons)


@pytest.fixture
def make_stream(tmp_path: Path) -> Iterator[object]:
    streams: list[Stream] = []

    def make(nodes: int = 3, **extra: object) -> Stream:
        work = tmp_path / f"stream{len(streams)}"
        path = write_local_config(work, nodes=nodes, extra=extra or None)
        stream = Stream(work, path, load_config(path))
        streams.append(stream)
        return stream

    yield make
    for stream in streams:
        for daemon in stream.daemons:
            daemon.stop()


@dataclass(frozen=True)
class OneNode:
    """A one-node stream that keeps acknowledged files: its configuration, pub-1's
    publisher root and rt-1's replica of ``trades.pub-1``, for a push server and client
    run in the test's own event loop."""

    config: StreamConfig
    root: Path
    replica: Path


def one_node(tmp_path: Path) -> OneNode:
    config = load_config(
        write_local_config(tmp_path, nodes=1, extra={"replication": {"delete_acked": False}})
    )
    return OneNode(
        config,
        config.data_dir_of(config.publisher("pub-1")) / "pub",
        config.data_dir_of(config.node("rt-1")) / "in" / "trades.pub-1",
    )
