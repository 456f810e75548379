"""Partitions through TCP relays, where network namespaces cannot be had: real sockets on
loopback addresses, and a whole ``rt chaos`` run that partitions through them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.config import StreamConfig, load_config
from rt_lab.chaos.relays import RelayNetwork, client_address, pair_address
from rt_lab.testing.cluster import wait_until, write_local_config
from rt_lab.testing.stream import free_ports

pytestmark = pytest.mark.integration

WAIT_S = 0.5  # how long "nothing arrives" is watched for


class _Echo:
    """A node's server on its raft port: answers every byte, counting what it got."""

    def __init__(self, address: str, port: int) -> None:
        self.received = 0
        self.accepted = 0
        self.sock = socket.create_server((address, port))
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                self.received += len(data)
                conn.sendall(data)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture()
def relays(tmp_path: Path) -> Iterator[tuple[StreamConfig, RelayNetwork, dict[str, _Echo]]]:
    addresses = [f"127.0.0.{i}" for i in (1, 2, 3)]
    names = ["push_lb", "pull", "push", "raft", "control"]
    ports = dict(zip(names, free_ports(addresses, len(names)), strict=True))
    config = load_config(write_local_config(tmp_path, 3, extra={"ports": ports}))
    echoes = {n.name: _Echo(n.host, config.ports.raft) for n in config.nodes}
    network = RelayNetwork(config)
    try:
        yield config, network, echoes
    finally:
        network.close()
        for echo in echoes.values():
            echo.close()


def _dial(address: str, port: int) -> socket.socket:
    s = socket.create_connection((address, port), timeout=5)
    s.settimeout(5)
    return s


def _read(s: socket.socket, n: int) -> bytes:
    """``n`` bytes, however the relay and TCP cut them up."""
    got = b""
    while len(got) < n and (chunk := s.recv(n - len(got))):
        got += chunk
    return got


def _nothing_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        s.recv(1)
    except TimeoutError:
        return True
    finally:
        s.settimeout(5)
    return False


def test_a_view_names_relays_for_every_other_node(
    relays: tuple[StreamConfig, RelayNetwork, dict[str, _Echo]],
) -> None:
    _config, network, _ = relays
    view = {n["name"]: n for n in network.view("rt-1")}
    assert view["rt-1"]["host"] == "127.0.0.1"
    assert view["rt-2"]["host"] == pair_address(1, 2)
    assert view["rt-3"]["host"] == pair_address(1, 3)
    assert {n["advertised_host"] for n in view.values()} == {client_address(j) for j in (1, 2, 3)}
    clients = {n["name"]: n["host"] for n in network.view("pub-1")}
    assert clients == {
        "rt-1": client_address(1),
        "rt-2": client_address(2),
        "rt-3": client_address(3),
    }


def test_a_blocked_link_holds_bytes_until_it_heals(
    relays: tuple[StreamConfig, RelayNetwork, dict[str, _Echo]],
) -> None:
    config, network, echoes = relays
    port = config.ports.raft
    with _dial(pair_address(1, 2), port) as s:
        s.sendall(b"ping")
        assert _read(s, 4) == b"ping"
        network.block("rt-1", "rt-2")
        s.sendall(b"held")
        assert _nothing_within(s, WAIT_S)
        assert echoes["rt-2"].received == 4  # nothing got through
        with _dial(pair_address(3, 2), port) as other:  # rt-3 still reaches rt-2
            other.sendall(b"free")
            assert _read(other, 4) == b"free"
        network.heal()
        assert _read(s, 4) == b"held"  # delayed, not lost: as TCP sends it again


def test_one_way_loss_lets_bytes_through_one_way_only(
    relays: tuple[StreamConfig, RelayNetwork, dict[str, _Echo]],
) -> None:
    config, network, echoes = relays
    with _dial(pair_address(1, 3), config.ports.raft) as s:
        s.sendall(b"a")
        assert _read(s, 1) == b"a"
        network.block("rt-3", "rt-1")  # rt-3's answers are lost, rt-1's bytes arrive
        s.sendall(b"bc")
        wait_until(lambda: echoes["rt-3"].received == 3, 5, "rt-1's bytes reaching rt-3")
        assert _nothing_within(s, WAIT_S)
        network.heal()
        assert _read(s, 2) == b"bc"


def test_no_new_connection_gets_through_a_cut_until_it_heals(
    relays: tuple[StreamConfig, RelayNetwork, dict[str, _Echo]],
) -> None:
    config, network, echoes = relays
    network.cut("rt-2")
    with _dial(client_address(2), config.ports.raft) as s:  # a client: cut off too
        s.sendall(b"x")
        assert _nothing_within(s, WAIT_S)
        assert echoes["rt-2"].accepted == 0
        network.heal()
        assert _read(s, 1) == b"x"
    assert echoes["rt-2"].accepted == 1


@pytest.mark.slow
def test_a_chaos_run_partitions_through_relays(tmp_path: Path) -> None:
    # seed 5, 24 s, partitions only: the leader is cut off from the other nodes for 12 s
    # from 5 s to 17.3 s (the one fault seed 5 draws in 30 s too), then 6.7 s under load
    workdir = tmp_path / "run"
    command = [
        sys.executable, "-m", "rt_appliance.cli", "chaos", "--minutes", "0.4",
        "--faults", "partition", "--partitions", "relays", "--seed", "5",
        "--workdir", str(workdir),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "PASS: seed 5" in output
    report = json.loads((workdir / "report.json").read_text())
    (fault,) = [f for f in report["injected"] if f["kind"] == "partition"]
    assert fault["error"] is None, fault
    cut_off = fault["did"].split()[1]  # "leader rt-2 cut off from the other nodes"
    during = [
        s["leader"] for s in report["samples"] if fault["started"] + 3 < s["t"] < fault["ended"]
    ]
    assert during and all(leader not in (None, cut_off) for leader in during[-3:]), during
    assert (workdir / "views" / "rt-1.yaml").exists()
