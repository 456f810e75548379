"""Raft's port refuses garbage and pickles, and the cluster keeps serving."""

from __future__ import annotations

import pickle
import socket
import ssl
import struct
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from rt_appliance.certs.authority import create_ca, issue_host_cert
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.fault, pytest.mark.slow]

TWO = {"pub-1": ["trades"], "pub-2": ["quotes"]}


class _Pwn:
    """Unpickling this would create ``path``: what an attacker's payload would do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def _frame(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


def _tls_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.load_verify_locations(ca)
    ctx.load_cert_chain(cert, key)
    return ctx


def _send(address: tuple[str, int], data: bytes, ctx: ssl.SSLContext | None) -> str:
    """Send ``data`` (over TLS with ``ctx``); return how the connection ended."""
    with socket.create_connection(address, timeout=5) as raw:
        try:
            sock = ctx.wrap_socket(raw) if ctx is not None else raw
            sock.sendall(data)
            sock.settimeout(5)
            return "closed" if sock.recv(1024) == b"" else "answered"
        except (ssl.SSLError, OSError) as exc:
            return f"refused: {exc}"


def refusals(stream, node: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    for n in stream.status()["nodes"]:
        if n["name"] == node:
            return dict(n["refused"])
    return {}


def test_garbage_and_pickles_are_refused_and_the_cluster_serves(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL).start()
    leader = stream.wait_leader()
    feeds = [Feed(stream, "pub-1", "trades"), Feed(stream, "pub-2", "quotes")]
    for f in feeds:
        f.publish(1, 2000)
    check_stream(stream, feeds)
    node = stream.config.node(leader)
    address = (node.host, stream.config.ports.raft)
    marker = Path(tempfile.mkdtemp()) / "unpickled"
    evil = _frame(pickle.dumps(_Pwn(marker), protocol=4))
    tls = Path(stream.config.tls.dir)

    # 1. garbage in plain TCP: not a TLS handshake
    assert _send(address, b"\x00\x01garbage raft frame" * 50, None) != "answered"
    # 2. a pickle from a peer whose certificate another CA signed: refused at the handshake
    ca_key, ca_cert = create_ca("intruders")
    peer = next(n.name for n in stream.config.nodes if n.name != leader)
    key, cert = issue_host_cert(ca_key, ca_cert, peer, ["127.0.0.9"])
    other = Path(tempfile.mkdtemp())
    (other / "c.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (other / "c.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    outcome = _send(address, evil, _tls_context(other / "c.crt", other / "c.key", tls / "ca.crt"))
    assert outcome != "answered"
    # 3. even a valid node certificate cannot make the leader unpickle a global
    ctx = _tls_context(tls / f"{peer}.crt", tls / f"{peer}.key", tls / "ca.crt")
    assert _send(address, evil, ctx) != "answered"
    # 4. and a garbage frame from that node is dropped the same way
    assert _send(address, _frame(b"\x80\x05not a pickle at all"), ctx) != "answered"
    # 5. plain data that is not a message raft can take (no term): dropped, not a crash
    assert _send(address, _frame(pickle.dumps({"type": "append_entries"})), ctx) != "answered"

    wait_until(
        lambda: (
            refusals(stream, leader).get("handshake", 0) >= 2
            and refusals(stream, leader).get("frame", 0) >= 3
        ),
        20,
        "the refusals to be counted",
    )
    assert not marker.exists(), "a pickled payload was executed"
    assert stream.leader() == leader  # nothing disturbed raft
    for f in feeds:
        f.publish(2001, 4000)
    check_stream(stream, feeds)
