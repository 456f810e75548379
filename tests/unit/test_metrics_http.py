"""The metrics endpoint refuses what is not a scrape, counts it, and cannot be held."""

from __future__ import annotations

import select
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from rt_appliance.daemons import metrics_http
from rt_appliance.limits import METRICS_MAX_CONNECTIONS
from rt_lab.testing.cluster import wait_until

pytestmark = pytest.mark.unit

TIMEOUT_S = 1.0


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[metrics_http.MetricsServer]:
    monkeypatch.setattr(metrics_http, "METRICS_REQUEST_TIMEOUT_S", TIMEOUT_S)
    monkeypatch.setattr(metrics_http._Handler, "timeout", TIMEOUT_S)
    registry = CollectorRegistry()
    Counter("rt_example", "an example", registry=registry).inc(3)
    made = metrics_http.start(registry, "127.0.0.1", 0)
    yield made
    made.shutdown()
    made.server_close()


def _scrape(server: metrics_http.MetricsServer) -> str:
    port = server.server_address[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def _rejected(server: metrics_http.MetricsServer, reason: str) -> float:
    return float(server.rejected.labels(reason)._value.get())


def _address(server: metrics_http.MetricsServer) -> tuple[str, int]:
    return "127.0.0.1", int(server.server_address[1])


def _send(server: metrics_http.MetricsServer, data: bytes) -> bytes:
    """Everything the server answers to ``data`` until it closes the connection."""
    answer = b""
    with socket.create_connection(_address(server), timeout=5) as sock:
        sock.sendall(data)
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def test_a_scrape_gets_the_registry(server: metrics_http.MetricsServer) -> None:
    assert "rt_example_total 3.0" in _scrape(server)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"\x16\x03\x01\x02\x00garbage\r\n\r\n", b"Error code: 400"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"HTTP/1.0 414"),
        (
            b"GET / HTTP/1.1\r\n" + b"".join(b"h%d: x\r\n" % i for i in range(200)) + b"\r\n",
            b"HTTP/1.0 431",
        ),
    ],
    ids=["garbage", "long-line", "many-headers"],
)
def test_a_malformed_request_is_answered_with_an_error_and_counted(
    server: metrics_http.MetricsServer, request_bytes: bytes, status: bytes
) -> None:
    assert status in _send(server, request_bytes)
    assert _rejected(server, "bad-request") == 1
    assert _rejected(server, "error") == 0
    assert "rt_example_total 3.0" in _scrape(server)


def test_a_slow_loris_client_is_cut_off_at_the_deadline(
    server: metrics_http.MetricsServer,
) -> None:
    started = time.monotonic()
    closed_after = None
    with socket.create_connection(_address(server), timeout=5) as sock:
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 100:
            try:  # a byte at a time, never the whole request
                sock.sendall(bytes([byte]))
                if select.select([sock], [], [], 0.1)[0] and not sock.recv(4096):
                    closed_after = time.monotonic() - started
                    break
            except OSError:
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None and closed_after < TIMEOUT_S + 3, closed_after
    wait_until(lambda: _rejected(server, "timeout") == 1, 5, "the timeout to be counted")


def test_connections_beyond_the_limit_are_closed_and_the_rest_time_out(
    server: metrics_http.MetricsServer,
) -> None:
    idle = [socket.create_connection(_address(server)) for _ in range(24)]
    try:
        wait_until(
            lambda: _rejected(server, "too-many-connections") == 24 - METRICS_MAX_CONNECTIONS,
            5,
            "the connections past the limit to be refused",
        )
        wait_until(
            lambda: _rejected(server, "timeout") == METRICS_MAX_CONNECTIONS,
            TIMEOUT_S + 5,
            "the idle connections to be cut off",
        )
        for sock in idle:  # every one was closed by the server
            sock.settimeout(2)
            assert sock.recv(16) == b""
        assert "rt_example_total 3.0" in _scrape(server)  # and scrapes are served again
    finally:
        for sock in idle:
            sock.close()


def test_starting_looks_nothing_up_in_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """http.server looks its own address up (``getfqdn``); where DNS is out of reach (a
    node in a network namespace, rt chaos) that held every daemon's start for 10 s."""

    def lookup(name: str = "") -> str:
        raise AssertionError(f"a DNS lookup of {name!r} at start")

    monkeypatch.setattr(socket, "getfqdn", lookup)
    made = metrics_http.start(CollectorRegistry(), "127.0.0.1", 0)
    try:
        assert made.server_name == "127.0.0.1"
        assert "python_info" not in _scrape(made)  # an empty registry, served
    finally:
        made.shutdown()
        made.server_close()
