"""Push replication with real processes and real TLS on 127.0.0.x."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_lab.testing.checkers import log_files, same_log_files
from rt_lab.testing.cluster import Daemon, wait_until
from rt_lab.testing.faults import TcpRelay
from tests.helpers import rt
from tests.replication.conftest import Stream

pytestmark = pytest.mark.integration

NODES = ["rt-1", "rt-2", "rt-3"]


def publish(root: Path, batches: int, roll_bytes: int = 256 << 10, first: int = 0) -> None:
    with Publisher(root, "trades", "pub-1", fsync="never", roll_bytes=roll_bytes) as pub:
        for b in range(batches):
            pub.publish_batch([b"message %d" % (first + b * 1000 + i) for i in range(1000)])


def wait_identical(
    stream: Stream, expected: dict[str, bytes], nodes: list[str] = NODES, timeout: float = 30
) -> None:
    wait_until(
        lambda: all(same_log_files(expected, stream.replica(n)) for n in nodes),
        timeout,
        f"replicas identical to the source\n{stream.logs()}",
    )


def test_three_replicas_byte_identical_and_acked_files_deleted(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream()
    publish(stream.pub_root(), 40)  # ~1.5 MB, several rolled files
    source = stream.pub_root() / "trades.pub-1"
    expected = log_files(source)
    assert len(expected) > 3
    for node in NODES:
        stream.push_server(node)
    stream.push_client()
    wait_identical(stream, expected)
    # Every rolled file is on every node, so the client deletes them; the newest stays.
    newest = max(expected, key=lambda n: tuple(int(x) for x in n.split(".")[1:]))
    wait_until(lambda: sorted(log_files(source)) == [newest], 10, "acknowledged files deleted")
    assert log_files(source)[newest] == expected[newest]


def test_follows_new_data_and_survives_server_restart(make_stream: Callable[..., Stream]) -> None:
    stream = make_stream(replication={"delete_acked": False})
    servers = {node: stream.push_server(node) for node in NODES}
    stream.push_client()
    source = stream.pub_root() / "trades.pub-1"
    publish(stream.pub_root(), 10)
    wait_identical(stream, log_files(source))
    done = threading.Event()

    def keep_publishing() -> None:
        publish(stream.pub_root(), 60, first=10_000)
        done.set()

    writer = threading.Thread(target=keep_publishing)
    writer.start()
    wait_until(
        lambda: len(log_files(source)) > len(log_files(stream.replica("rt-2"))) - 1, 10, "more data"
    )
    servers["rt-2"].kill(signal.SIGKILL)  # mid-stream
    servers["rt-2"] = stream.push_server("rt-2")
    writer.join()
    assert done.is_set()
    wait_identical(stream, log_files(source))


def test_client_killed_mid_stream_resumes_without_gap_or_duplicate(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(replication={"delete_acked": False, "max_frame_bytes": "64KiB"})
    publish(stream.pub_root(), 300, roll_bytes=4 << 20)  # ~11 MB of backlog
    source = stream.pub_root() / "trades.pub-1"
    expected = log_files(source)
    for node in NODES:
        stream.push_server(node)
    client = stream.push_client()
    wait_until(lambda: any(log_files(stream.replica(n)) for n in NODES), 20, "replication started")
    client.kill(signal.SIGKILL)
    assert not all(same_log_files(expected, stream.replica(n)) for n in NODES), (
        "killed too late to test"
    )
    stream.push_client()
    wait_identical(stream, expected, timeout=60)


def test_load_balancer_mode_holds_one_connection_per_node(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(load_balancer="127.0.0.9:5000", replication={"delete_acked": False})
    relay = TcpRelay(("127.0.0.9", 5000), [(f"127.0.0.{i}", 5002) for i in (1, 1, 2, 3)])
    try:
        for node in NODES:
            stream.push_server(node)
        publish(stream.pub_root(), 5)
        stream.push_client()
        wait_identical(stream, log_files(stream.pub_root() / "trades.pub-1"))
        assert relay.connections >= 3
    finally:
        relay.close()


def test_byte_flipped_in_flight_breaks_the_connection_not_the_replica(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(
        nodes=1, load_balancer="127.0.0.9:5000", replication={"delete_acked": False}
    )
    relay = TcpRelay(("127.0.0.9", 5000), [("127.0.0.1", 5002)], flip_at=20_000)
    try:
        server = stream.push_server("rt-1")
        publish(stream.pub_root(), 20)
        client = stream.push_client()
        wait_identical(stream, log_files(stream.pub_root() / "trades.pub-1"), nodes=["rt-1"])
        assert relay.flipped and relay.connections >= 2
        assert "connection" in client.log() and "retrying" in client.log()
        assert "ended" in server.log()
    finally:
        relay.close()


def test_replication_status_shows_state_and_lag(make_stream: Callable[..., Stream]) -> None:
    stream = make_stream(subscribers=[], replication={"delete_acked": False})
    servers = {node: stream.push_server(node) for node in NODES}
    publish(stream.pub_root(), 5)
    stream.push_client(metrics_port=None)
    wait_identical(stream, log_files(stream.pub_root() / "trades.pub-1"))

    def status() -> tuple[int, list[dict[str, object]]]:
        result = rt(
            "replication", "status", "--config", str(stream.config_path), "--json", check=False
        )
        return result.returncode, json.loads(result.stdout)

    def summary() -> tuple[int, list[tuple[object, ...]]]:
        code, rows = status()
        return code, [(r["node"], r["dir"], r["state"], r["lag_bytes"]) for r in rows]

    healthy = [(n, "trades.pub-1", "connected", 0) for n in NODES]
    wait_until(lambda: summary() == (0, healthy), 20, "every connection connected with no lag")
    servers["rt-3"].kill(signal.SIGKILL)
    down = [*healthy[:2], ("rt-3", "trades.pub-1", "disconnected", None)]
    wait_until(
        lambda: (
            summary()[0] == 1
            and summary()[1][:2] == down[:2]
            and summary()[1][2][2] == "disconnected"
        ),
        20,
        "rt-3 shown disconnected",
    )
    _, rows = status()
    assert all(isinstance(r["acked_position"], int) and r["acked_position"] > 0 for r in rows[:2])


def test_replication_status_shows_pull_connections(make_stream: Callable[..., Stream]) -> None:
    stream = make_stream(nodes=1, publishers=[])
    merged = stream.config.data_dir_of(stream.config.node("rt-1")) / "merged"
    publish(merged.parent / "scratch", 3)
    merged.mkdir(parents=True)
    for f in (merged.parent / "scratch" / "trades.pub-1").glob("log.*"):
        (merged / f.name).write_bytes(f.read_bytes())
    cfg = str(stream.config_path)
    stream.pull_server("rt-1", metrics_port=None)  # where rt replication status looks
    stream.start(
        Daemon(
            "pull-client-sub-1",
            ["pull-client", "--config", cfg, "--host", "sub-1"],
            stream.work / "logs",
        )
    )

    def rows() -> list[tuple[object, ...]]:
        out = rt("replication", "status", "--config", cfg, "--json", check=False).stdout
        return [
            (r["kind"], r["client"], r["node"], r["state"], r["lag_bytes"]) for r in json.loads(out)
        ]

    wait_until(
        lambda: rows() == [("pull", "sub-1", "rt-1", "connected", 0)],
        30,
        f"the pull connection in the status\n{stream.logs()}",
    )
