"""Every daemon under a stand-in for systemd: READY when it serves, pings from its loop,
STOPPING and a clean exit on SIGTERM.

Each daemon runs its real command line (`rt node`, `rt push-client`, `rt pull-client`)
with NOTIFY_SOCKET, WATCHDOG_USEC (1.5 s) and WATCHDOG_PID set as systemd sets them; the
harness refuses any message that does not come from the daemon's own PID
(NotifyAccess=main).
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.config import StreamConfig, load_config
from rt_appliance.transport.tls import client_context
from rt_lab.testing.cluster import write_local_config
from rt_lab.testing.notify import NotifyHarness

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RT = [sys.executable, "-m", "rt_appliance.cli"]
WATCHDOG_S = 1.5
FREEZE_S = 3 * WATCHDOG_S / 2  # longer than the watchdog: systemd would restart the daemon


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StreamConfig]:
    work = tmp_path_factory.mktemp("notify")
    path = write_local_config(work, nodes=1)
    return path, load_config(path)


# command -> (the option naming the host, the host, the ports READY promises accept TLS,
# each with who connects)
DAEMONS: dict[str, tuple[str, str, tuple[tuple[str, str], ...]]] = {
    "node": ("--node", "rt-1", (("push", "pub-1"), ("raft", "rt-1"), ("pull", "sub-1"))),
    "push-client": ("--host", "pub-1", ()),
    "pull-client": ("--host", "sub-1", ()),
}


@pytest.fixture()
def harness(tmp_path: Path) -> Iterator[NotifyHarness]:
    with NotifyHarness(tmp_path / "notify.sock", tmp_path / "daemon.log", WATCHDOG_S) as h:
        yield h


def start(harness: NotifyHarness, stream: tuple[Path, StreamConfig], role: str) -> None:
    option, host, _ = DAEMONS[role]
    argv = [*RT, "--log-level", "info", role, "--config", str(stream[0]), option, host]
    argv += ["--metrics-port", "0"]
    harness.start(argv, {"RT_TEST_HOOKS": "1", "RT_TEST_FREEZE_S": str(FREEZE_S)})


def tls_handshake(config: StreamConfig, port: int, as_host: str) -> None:
    """Connect to rt-1's ``port`` and complete a TLS handshake (raises if refused)."""
    context: ssl.SSLContext = client_context(config.tls, as_host)
    address = (config.node("rt-1").host, port)
    with socket.create_connection(address, timeout=5) as raw, context.wrap_socket(raw) as tls:
        tls.do_handshake()


@pytest.mark.parametrize("role", list(DAEMONS))
def test_ready_watchdog_freeze_and_clean_stop(
    harness: NotifyHarness, stream: tuple[Path, StreamConfig], role: str
) -> None:
    _, config = stream
    _, _, ports = DAEMONS[role]
    start(harness, stream, role)

    ready = harness.wait_for("READY", "1", timeout_s=60)
    for port_name, as_host in ports:  # READY promises every port accepts TLS
        tls_handshake(config, getattr(config.ports, port_name), as_host)
    assert ready.fields.get("STATUS"), ready.fields
    assert not any("READY" in m.fields for m in harness.received[:-1])  # sent once

    # Pings keep coming, each well within the watchdog.
    gaps = harness.gaps("WATCHDOG", 2.5 * WATCHDOG_S)
    assert len(gaps) >= 2 and max(gaps) < WATCHDOG_S, gaps

    # A blocked event loop stops them (a ping from another thread would not).
    assert harness.process is not None
    os.kill(harness.process.pid, signal.SIGUSR2)
    gaps = harness.gaps("WATCHDOG", FREEZE_S + 2 * WATCHDOG_S)
    assert "test hook: blocking the event loop" in harness.log()
    assert max(gaps) > WATCHDOG_S, f"pings went on while the loop was blocked: {gaps}"
    assert gaps[-1] < WATCHDOG_S, f"pings did not resume: {gaps}"

    # SIGTERM: STOPPING=1, then a clean exit.
    harness.process.send_signal(signal.SIGTERM)
    harness.wait_for("STOPPING", "1", timeout_s=10)
    assert harness.process.wait(20) == 0, harness.log()


def test_a_stopped_process_sends_no_pings(
    harness: NotifyHarness, stream: tuple[Path, StreamConfig]
) -> None:
    start(harness, stream, "node")
    harness.wait_for("READY", "1", timeout_s=60)
    assert harness.process is not None
    harness.received.clear()
    os.kill(harness.process.pid, signal.SIGSTOP)
    try:
        assert harness.poll(1.5 * WATCHDOG_S) is None  # systemd's watchdog would fire
    finally:
        os.kill(harness.process.pid, signal.SIGCONT)
    harness.wait_for("WATCHDOG", "1", timeout_s=2 * WATCHDOG_S)


def test_status_line_says_what_the_daemon_does(
    harness: NotifyHarness, stream: tuple[Path, StreamConfig]
) -> None:
    start(harness, stream, "node")
    ready = harness.wait_for("READY", "1", timeout_s=60)
    assert ready.fields["STATUS"].split(",")[0] in {"follower", "candidate", "leader"}
    # A single node elects itself: the status line follows (a line is sent only when it
    # changes, so a node that led already when it was ready sends no other)
    message = ready
    deadline = time.monotonic() + 30
    while not message.fields["STATUS"].startswith("leader, term "):
        if time.monotonic() >= deadline:
            pytest.fail(f"status never said leader: {[m.fields for m in harness.received]}")
        message = harness.wait_for("STATUS", timeout_s=30)
    assert "merged seq 0" in message.fields["STATUS"]
