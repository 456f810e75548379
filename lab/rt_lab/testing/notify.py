"""A stand-in for systemd's side of the notify protocol, to test daemons without systemd.

:class:`NotifyHarness` owns an ``AF_UNIX`` datagram socket with ``SO_PASSCRED`` set, as
systemd's is, so every message arrives with the sender's PID and a message from any
process but the main one is refused (``NotifyAccess=main``). It starts a daemon's real
command line with ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` set the way
systemd sets them (``WATCHDOG_PID`` is the daemon's own PID: a shell sets it, then
``exec``s the daemon).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Notification", "NotifyHarness"]

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Notification:
    """One datagram: when it arrived, who sent it, and its ``KEY=value`` fields."""

    at: float  # time.monotonic()
    pid: int
    fields: dict[str, str]


@dataclass
class NotifyHarness:
    """One daemon under a notify socket; use as a context manager."""

    socket_path: Path
    log_path: Path
    watchdog_s: float = 2.0
    received: list[Notification] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.bind(str(self.socket_path))

    def __enter__(self) -> NotifyHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self._sock.close()
        self.socket_path.unlink(missing_ok=True)

    def start(self, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        env = {**os.environ, **(extra_env or {})}
        env["NOTIFY_SOCKET"] = str(self.socket_path)
        env["WATCHDOG_USEC"] = str(int(self.watchdog_s * 1_000_000))
        shell = 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"'
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                ["sh", "-c", shell, "sh", *argv], env=env, stdout=log, stderr=log
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def poll(self, timeout_s: float) -> Notification | None:
        """The next message from the main process within ``timeout_s``, else None."""
        self._sock.settimeout(max(timeout_s, 0.001))
        try:
            data, ancillary, _, _ = self._sock.recvmsg(4096, socket.CMSG_SPACE(_UCRED.size))
        except TimeoutError:
            return None
        pid = -1
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = _UCRED.unpack(payload[: _UCRED.size])[0]
        assert self.process is not None
        if pid != self.process.pid:
            raise AssertionError(f"message from pid {pid}, not the main pid {self.process.pid}")
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
        message = Notification(time.monotonic(), pid, fields)
        self.received.append(message)
        return message

    def wait_for(self, key: str, value: str | None = None, timeout_s: float = 30.0) -> Notification:
        """The next message carrying ``key`` (with ``value``, if given); fail after the deadline."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            message = self.poll(min(left, 0.2))
            if (
                message is not None
                and key in message.fields
                and (value is None or message.fields[key] == value)
            ):
                return message
            assert self.process is not None
            if message is None and self.process.poll() is not None:
                raise AssertionError(
                    f"exited {self.process.returncode} before {key}:\n{self.log()}"
                )
        raise AssertionError(f"no {key}={value or '*'} within {timeout_s}s:\n{self.log()}")

    def gaps(self, key: str, during_s: float) -> list[float]:
        """Collect messages for ``during_s``; the times between those carrying ``key``."""
        end = time.monotonic() + during_s
        while (left := end - time.monotonic()) > 0:
            self.poll(left)
        times = [m.at for m in self.received if key in m.fields]
        return [b - a for a, b in itertools.pairwise(times)]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
