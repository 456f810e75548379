"""Bad input at every listening port of a node: refused, counted, harmless, nothing held.

Each TLS port of node rt-1 (push server, raft, control channel, pull server) gets, all at
once while a publisher keeps publishing: random bytes, a TLS handshake cut short, a TLS
client without a certificate, one with another CA's certificate, an oversized frame
length and garbage from a valid peer after the handshake, and a slow-loris client that
sends its handshake a byte at a time. Each daemon's metrics port (plain HTTP) gets at the
same time random bytes, a TLS handshake, an over-long request line, too many headers, a
slow-loris request and a connection that sends nothing. Every connection must be closed
by the daemon (the slow ones within the handshake or request timeout), every daemon
must count the refusals in its metrics, keep running and hold no more descriptors and
not much more memory than before; and the stream ends with every merged log and copy
identical and every message once.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import ssl
import struct
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from rt_appliance.certs.authority import create_ca, issue_host_cert
from rt_appliance.certs.files import cert_pem, key_pem
from rt_appliance.limits import HANDSHAKE_TIMEOUT_S, METRICS_REQUEST_TIMEOUT_S
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.fault, pytest.mark.slow]

NODE = "rt-1"
CLOSE_WITHIN_S = HANDSHAKE_TIMEOUT_S + 10  # every bad connection is closed by then
FD_SLACK = 3  # connections a daemon may open meanwhile for its own work (a redial)
RSS_SLACK = 64 << 20  # memory a daemon may grow by meanwhile (buffers of the stream itself)
HTTP_CLOSE_WITHIN_S = METRICS_REQUEST_TIMEOUT_S + 10

# port key -> (the daemon behind it, the host whose certificate a valid peer uses,
# the frame header of its protocol, the metric counting its refusals)
PORTS: dict[str, tuple[str, str, struct.Struct, str]] = {
    "push": ("push-server", "pub-1", struct.Struct("<IB"), "rt_push_server_rejected_connections"),
    "raft": ("sequencer", "rt-2", struct.Struct("<I"), "rt_sequencer_refused"),
    "control": ("sequencer", "rt-2", struct.Struct("<IB"), "rt_sequencer_refused"),
    "pull": ("pull-server", "sub-1", struct.Struct("<IB"), "rt_pull_server_rejected"),
}
# the node process serves every part's metrics on one endpoint
METRICS_PORT = {"sequencer": "sequencer_metrics"}


class _Tls:
    """Client contexts: a valid host's, none at all, and another CA's."""

    def __init__(self, stream: LocalStream) -> None:
        self.dir = Path(stream.config.tls.dir_of(NODE))
        other = Path(tempfile.mkdtemp(prefix="other-ca-"))
        ca_key, ca_cert = create_ca("intruders")
        key, cert = issue_host_cert(ca_key, ca_cert, "pub-1", ["127.0.0.1"])
        (other / "c.crt").write_bytes(cert_pem(cert))
        (other / "c.key").write_bytes(key_pem(key))
        self.other = other

    def _base(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False
        ctx.load_verify_locations(self.dir / "ca.crt")
        return ctx

    def valid(self, host: str) -> ssl.SSLContext:
        ctx = self._base()
        ctx.load_cert_chain(self.dir / f"{host}.crt", self.dir / f"{host}.key")
        return ctx

    def without_certificate(self) -> ssl.SSLContext:
        return self._base()

    def other_ca(self) -> ssl.SSLContext:
        ctx = self._base()
        ctx.load_cert_chain(self.other / "c.crt", self.other / "c.key")
        return ctx


def _client_hello() -> bytes:
    """The first bytes a TLS client sends (its ClientHello), taken from a memory BIO."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
        obj.do_handshake()
    return outgoing.read()


def _frame_header(header: struct.Struct, length: int) -> bytes:
    """A frame header of ``length``: raft's is the length alone, the others' add a type."""
    return header.pack(length) if header.size == 4 else header.pack(length, 1)


def _closed_by_server(sock: socket.socket | ssl.SSLSocket, within_s: float) -> bool:
    """Read until the daemon closes the connection (True) or ``within_s`` passes."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except (ssl.SSLError, OSError):
            return True  # reset or a TLS alert: closed
    return False


def _attacks(tls: _Tls, port: str) -> dict[str, Callable[[tuple[str, int]], bool]]:
    """Each attack on ``port``: connects, misbehaves, and says whether the daemon closed it."""
    _, host, header, _ = PORTS[port]

    def plain(data: bytes) -> Callable[[tuple[str, int]], bool]:
        def run(address: tuple[str, int]) -> bool:
            with socket.create_connection(address, timeout=5) as sock:
                sock.sendall(data)
                return _closed_by_server(sock, CLOSE_WITHIN_S)

        return run

    def handshake(ctx: ssl.SSLContext) -> Callable[[tuple[str, int]], bool]:
        def run(address: tuple[str, int]) -> bool:
            with socket.create_connection(address, timeout=5) as raw:
                try:
                    sock = ctx.wrap_socket(raw)
                except (ssl.SSLError, OSError):
                    return True  # refused during the handshake
                with sock:
                    sock.sendall(_frame_header(header, 64))
                    return _closed_by_server(sock, CLOSE_WITHIN_S)

        return run

    def after_handshake(data: bytes) -> Callable[[tuple[str, int]], bool]:
        def run(address: tuple[str, int]) -> bool:
            raw = socket.create_connection(address, timeout=5)
            with raw, tls.valid(host).wrap_socket(raw) as sock:
                sock.sendall(data)
                return _closed_by_server(sock, CLOSE_WITHIN_S)

        return run

    def slow_loris(address: tuple[str, int]) -> bool:
        hello = _client_hello()
        with socket.create_connection(address, timeout=5) as sock:
            started = time.monotonic()
            for byte in hello:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return time.monotonic() - started < CLOSE_WITHIN_S
                if time.monotonic() - started > CLOSE_WITHIN_S:
                    return False
                time.sleep(0.5)
            return _closed_by_server(sock, CLOSE_WITHIN_S - (time.monotonic() - started))

    return {
        "random bytes": plain(random.Random(port).randbytes(4096)),
        "truncated handshake": plain(_client_hello()[:40]),
        "no certificate": handshake(tls.without_certificate()),
        "another CA": handshake(tls.other_ca()),
        "oversized frame": after_handshake(_frame_header(header, 0xFFFFFFFF)),
        "garbage after handshake": after_handshake(random.Random(7).randbytes(3000)),
        "slow loris": slow_loris,
    }


def _http_attacks() -> dict[str, Callable[[tuple[str, int]], bool]]:
    """Each attack on a metrics port: says whether the daemon closed the connection."""

    def sends(data: bytes) -> Callable[[tuple[str, int]], bool]:
        def run(address: tuple[str, int]) -> bool:
            with socket.create_connection(address, timeout=5) as sock:
                sock.sendall(data)
                return _closed_by_server(sock, HTTP_CLOSE_WITHIN_S)

        return run

    def slow_loris(address: tuple[str, int]) -> bool:
        with socket.create_connection(address, timeout=5) as sock:
            started = time.monotonic()
            for byte in b"GET /metrics HTTP/1.1\r\nHost: rt-1\r\nX-Slow: " + b"y" * 200:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return True
                if time.monotonic() - started > HTTP_CLOSE_WITHIN_S:
                    return False
                if _closed_by_server(sock, 0.5):
                    return True
            return False

    return {
        "random bytes": sends(random.Random(3).randbytes(4096)),
        "a TLS handshake": sends(_client_hello()),
        "over-long request line": sends(b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"),
        "too many headers": sends(
            b"GET / HTTP/1.1\r\n" + b"".join(b"h%d: x\r\n" % i for i in range(200)) + b"\r\n"
        ),
        "nothing sent": sends(b""),
        "slow loris": slow_loris,
    }


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise AssertionError(f"no VmRSS for {pid}")


def _fds(pid: int) -> dict[str, str]:
    """The process's descriptors: number -> what it refers to (a file, ``socket:[...]``)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return found


def _sockets(pid: int) -> int:
    return sum(1 for target in _fds(pid).values() if target.startswith("socket:"))


def _metrics_daemons(stream: LocalStream) -> list[str]:
    """The processes of rt-1 with a metrics endpoint: rt node serves all on one."""
    return list(METRICS_PORT)


def _metric(stream: LocalStream, daemon: str, name: str) -> float:
    """The sum of every sample of counter ``name`` the daemon of rt-1 exports (in the
    node layout the node process, whichever part counts it)."""
    key = METRICS_PORT["sequencer"]
    port = getattr(stream.config.ports, key)
    host = stream.config.node(NODE).host
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f"{name}_total") or line.startswith(f"{name}{{")
    )


def _counted(stream: LocalStream, daemon: str, metric: str, least: float) -> Callable[[], bool]:
    return lambda: _metric(stream, daemon, metric) >= least


def _sockets_at_most(pid: int, most: int) -> Callable[[], bool]:
    return lambda: _sockets(pid) <= most


def test_bad_input_at_every_port_is_refused_counted_and_holds_nothing(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra=SMALL).start()
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.publish(1, 2000)
    check_stream(stream, [feed])
    tls = _Tls(stream)
    daemons = {"sequencer": stream.node_daemon(NODE)}
    pids = {role: d.proc.pid for role, d in daemons.items() if d.proc is not None}
    before_fds = {role: _fds(pid) for role, pid in pids.items()}
    before_sockets = {role: _sockets(pid) for role, pid in pids.items()}
    before_rss = {role: _rss(pid) for role, pid in pids.items()}
    metrics_daemons = _metrics_daemons(stream)
    before_http = {d: _metric(stream, d, "rt_metrics_http_rejected") for d in metrics_daemons}
    before_counts = {p: _metric(stream, PORTS[p][0], PORTS[p][3]) for p in PORTS}
    ports = stream.config.ports
    host = stream.config.node(NODE).host
    addresses = {
        "push": (host, ports.push),
        "raft": (host, ports.raft),
        "control": (host, ports.control),
        "pull": (host, ports.pull),
        **{daemon: (host, getattr(ports, METRICS_PORT[daemon])) for daemon in metrics_daemons},
    }
    outcomes: dict[tuple[str, str], bool] = {}

    def attack(port: str, name: str, run: Callable[[tuple[str, int]], bool]) -> None:
        try:
            outcomes[(port, name)] = run(addresses[port])
        except OSError:
            outcomes[(port, name)] = True  # refused at connect or reset: closed all the same

    feed.start(rate=2000)
    threads = [
        threading.Thread(target=attack, args=(port, name, run))
        for port in PORTS
        for name, run in _attacks(tls, port).items()
    ] + [
        threading.Thread(target=attack, args=(daemon, name, run))
        for daemon in metrics_daemons
        for name, run in _http_attacks().items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CLOSE_WITHIN_S * 3)
    feed.stop()

    left_open = sorted(f"{port}: {name}" for (port, name), ok in outcomes.items() if not ok)
    assert len(outcomes) == len(threads) and not left_open, left_open
    assert not stream.exited(), stream.exited()
    for port in PORTS:  # each daemon counted what it refused
        daemon, _, _, metric = PORTS[port]
        wait_until(
            _counted(stream, daemon, metric, before_counts[port] + 4),
            20,
            f"the refusals at the {port} port to be counted",
        )
    for daemon in metrics_daemons:
        wait_until(
            _counted(stream, daemon, "rt_metrics_http_rejected", before_http[daemon] + 5),
            20,
            f"the refusals at {daemon}'s metrics port to be counted",
        )
    for role, pid in pids.items():  # and holds no connection once the connections are gone
        try:  # (files it opens meanwhile are its own work: the feed rolls its inputs)
            wait_until(
                _sockets_at_most(pid, before_sockets[role] + FD_SLACK),
                20,
                f"{role}'s sockets to come back to {before_sockets[role]}",
            )
        except TimeoutError as exc:
            now = _fds(pid)
            new = sorted(target for fd, target in now.items() if before_fds[role].get(fd) != target)
            raise AssertionError(f"{exc}; descriptors new since: {new}") from None
    grown = {role: _rss(pid) - before_rss[role] for role, pid in pids.items()}
    assert all(growth < RSS_SLACK for growth in grown.values()), grown
    logs = stream.logs(tail_chars=400_000)
    assert "refused" in logs and "metrics endpoint refused a connection" in logs
    check_stream(stream, [feed])
