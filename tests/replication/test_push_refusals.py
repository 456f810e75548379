"""Push connections and data that must be refused, and what the refusal leaves behind."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from rt_appliance.certs import create_ca, issue_host_cert, load_certificate, load_private_key
from rt_appliance.config import load_config
from rt_appliance.errors import PeerRejectedError, TransportError
from rt_appliance.limits import STUCK_AFTER
from rt_appliance.replicate.sink import DAMAGED_DIR
from rt_appliance.transport.messages import FrameType
from rt_appliance.transport.session import connect
from rt_appliance.transport.tls import client_context
from rt_lab.testing.checkers import log_files
from rt_lab.testing.cluster import wait_until
from tests.helpers import rt
from tests.replication.conftest import Stream
from tests.replication.test_push import publish, wait_identical

pytestmark = pytest.mark.fault


def _replace_client_cert(stream: Stream, cert_pem: bytes, key_pem: bytes) -> None:
    """Give pub-1 a different certificate (in a copy of the TLS dir) via a second config file."""
    tls = stream.work / "tls-other"
    shutil.copytree(stream.work / "tls", tls)
    (tls / "pub-1.crt").write_bytes(cert_pem)
    (tls / "pub-1.key").write_bytes(key_pem)
    doc = yaml.safe_load(stream.config_path.read_text())
    doc["tls"] = {"dir": str(tls)}
    stream.config_path = stream.work / "rt-other.yaml"
    stream.config_path.write_text(yaml.safe_dump(doc))


def _pems(key: object, cert: object) -> tuple[bytes, bytes]:
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)  # type: ignore[attr-defined]
    key_pem = key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert_pem, key_pem


def _refused(stream: Stream, server_name: str = "rt-1") -> None:
    """Start rt-1 and the client; the client keeps failing and rt-1 holds nothing."""
    server = stream.push_server(server_name)
    publish(stream.pub_root(), 2)
    client = stream.push_client()
    wait_until(lambda: client.log().count("retrying") >= 3, 20, "repeated refusals")
    assert log_files(stream.replica(server_name)) == {}
    assert server.proc is not None and server.proc.poll() is None, (
        "a refused client must not crash the server"
    )


def test_certificate_from_another_ca_is_refused(make_stream: Callable[..., Stream]) -> None:
    stream = make_stream(nodes=1)
    ca_key, ca_cert = create_ca("intruders")
    key, cert = issue_host_cert(ca_key, ca_cert, "pub-1", ["127.0.1.1"])
    _replace_client_cert(stream, *_pems(key, cert))
    _refused(stream)


def test_expired_certificate_is_refused(make_stream: Callable[..., Stream]) -> None:
    stream = make_stream(nodes=1)
    tls = stream.work / "tls"
    ca_cert = load_certificate(tls / "ca.crt")
    ca_key = load_private_key(tls / "ca.key")
    key, cert = issue_host_cert(
        ca_key,
        ca_cert,
        "pub-1",
        ["127.0.1.1"],
        days=1,
        valid_from=datetime.now(UTC) - timedelta(days=10),
    )
    _replace_client_cert(stream, *_pems(key, cert))
    _refused(stream)


def test_publisher_cannot_write_another_hosts_topic(
    make_stream: Callable[..., Stream], tmp_path: Path
) -> None:
    stream = make_stream(
        nodes=1,
        publishers=[
            {"name": "pub-1", "host": "127.0.1.1", "topics": ["trades"]},
            {"name": "pub-2", "host": "127.0.1.2", "topics": ["quotes"]},
        ],
    )
    # write_local_config made certificates for the default publishers only: remake them.
    from rt_appliance.certs import init_for_config

    init_for_config(load_config(stream.config_path), stream.work / "tls", days=30, force=True)
    stream.config = load_config(stream.config_path)
    server = stream.push_server("rt-1")

    async def offer(dir_name: str) -> dict[str, object]:
        config = stream.config
        context = client_context(config.tls, "pub-1")
        conn, _ = await connect("127.0.0.1", 5002, context, config, "pub-1", "push", "rt-1")
        try:
            await conn.send(FrameType.OFFER, {"dir": dir_name})
            return await conn.receive_control(FrameType.RESUME)
        finally:
            await conn.close()

    async def attempt() -> dict[str, object]:
        """Offer its own directory once the server listens."""
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            try:
                return await offer("trades.pub-1")
            except TransportError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(0.05)

    assert asyncio.run(attempt())["position"] == 0  # its own topic: fine
    for foreign in ("quotes.pub-2", "trades.pub-2", "orders.pub-1"):
        with pytest.raises(PeerRejectedError, match="may not write"):
            asyncio.run(offer(foreign))
    assert not (
        stream.config.data_dir_of(stream.config.node("rt-1")) / "in" / "quotes.pub-2"
    ).exists()
    assert "may not write" in server.log()


def _damaged_replica(stream: Stream) -> tuple[dict[str, bytes], Path, str, bytes]:
    """Publish one file; rt-1 already holds it, but a byte in a middle record went bad on
    its disk. Returns the publisher's files, rt-1's replica dir, the file and its bytes."""
    publish(stream.pub_root(), 3, roll_bytes=1 << 20)
    expected = log_files(stream.pub_root() / "trades.pub-1")
    ((name, data),) = expected.items()
    replica = stream.replica("rt-1")
    replica.mkdir(parents=True)
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF
    (replica / name).write_bytes(bytes(damaged))
    return expected, replica, name, bytes(damaged)


def test_corrupt_replica_on_disk_is_kept_cut_and_sent_again(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(nodes=1, replication={"delete_acked": False})
    expected, replica, name, damaged = _damaged_replica(stream)
    server = stream.push_server("rt-1")
    stream.push_client()
    wait_identical(stream, expected, nodes=["rt-1"])
    kept = list((replica / DAMAGED_DIR).iterdir())
    assert [p.read_bytes() for p in kept] == [damaged], "the damaged file is kept whole"
    assert f"replica trades.pub-1 was damaged ({replica / name}: corrupt at offset" in server.log()


def test_a_damaged_replica_that_cannot_be_kept_is_refused(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(nodes=1, replication={"delete_acked": False})
    expected, replica, name, damaged = _damaged_replica(stream)
    (replica / DAMAGED_DIR).write_text("not a directory\n")  # nowhere to keep the damaged file
    server = stream.push_server("rt-1")
    client = stream.push_client()
    wait_until(
        lambda: "not repaired" in client.log() and "corrupt at offset" in server.log(),
        20,
        f"the refusal to be reported\n{stream.logs()}",
    )
    assert (replica / name).read_bytes() == damaged, "nothing may be written after corruption"
    # Once the operator removes the damaged copy, replication completes.
    (replica / name).unlink()
    wait_identical(stream, expected, nodes=["rt-1"])


def test_a_node_refusing_the_same_bytes_makes_the_connection_stuck(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(
        nodes=1,
        replication={"delete_acked": False, "reconnect_initial_ms": 20, "reconnect_max_ms": 600},
    )
    expected, replica, name, _ = _damaged_replica(stream)
    (replica / DAMAGED_DIR).write_text("not a directory\n")  # the damage cannot be repaired
    stream.push_server("rt-1")
    client = stream.push_client(metrics_port=None)

    def status() -> tuple[int, dict[str, object]]:
        result = rt(
            "replication", "status", "--config", str(stream.config_path), "--json", check=False
        )
        return result.returncode, json.loads(result.stdout)[0]

    wait_until(lambda: status()[1]["state"] == "stuck", 30, f"a stuck connection\n{stream.logs()}")
    code, row = status()
    assert code == 1 and "corrupt at offset" in str(row["problem"]), row  # stuck: exit 1
    table = rt("replication", "status", "--config", str(stream.config_path), check=False).stdout
    assert "stuck at" in table and "corrupt at offset" in table
    # one error says it, and the retries slow down to the ceiling instead of spinning
    assert client.log().count("is stuck") == 1, client.log()
    retries = client.log().count("retrying")
    stuck_lines = len(client.log().splitlines())
    url = (
        f"http://{stream.config.publisher('pub-1').host}:"
        f"{stream.config.ports.push_client_metrics}/metrics"
    )

    def metric(name: str) -> float:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        found = re.search(rf'^{name}{{node="rt-1"}} (\S+)$', text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    assert metric("rt_push_client_stuck_episodes_total") == 1.0
    # it keeps retrying (at the ceiling) without a line per retry
    reconnects, started = metric("rt_push_client_reconnects_total"), time.monotonic()
    wait_until(
        lambda: metric("rt_push_client_reconnects_total") >= reconnects + 3,
        30,
        "three more retries while stuck",
        interval_s=0.1,
    )
    # at the ceiling (600 ms, drawn in [300, 600] ms) two full delays separate three retries
    assert time.monotonic() - started >= 2 * 0.3
    assert len(client.log().splitlines()) - stuck_lines <= 2, client.log()[-2000:]
    assert retries >= STUCK_AFTER - 1  # warnings until it counts as stuck
    # the operator moves the damaged copy away: replication completes and the state clears
    (replica / name).unlink()
    wait_identical(stream, expected, nodes=["rt-1"])
    wait_until(lambda: status()[1]["state"] == "connected", 30, f"connected: {status()}")
    assert status()[1]["problem"] == ""
    assert "moves again" in client.log()
