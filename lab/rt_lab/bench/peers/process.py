"""Server processes for the peers: started by hand, on loopback, and always reaped.

Nothing here uses a system service: each server runs as a child of ``rt bench
peers`` in a session of its own (so its helpers, such as Erlang's, share its process
group), writes its output to a log file in the bench's work directory, and is stopped
with SIGTERM to that group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rt_appliance.errors import RTError

__all__ = [
    "ServerGroup",
    "ServerProcess",
    "free_ports",
    "port_open",
    "require_binary",
    "wait_ready",
]

STOP_GRACE_S = 15.0  # SIGTERM, then SIGKILL after this long
LOG_TAIL_CHARS = 2000


def require_binary(name: str, package: str, folders: Iterable[str] = ()) -> str:
    """The path of ``name`` in ``folders`` (default: PATH, then /usr/sbin and /usr/bin),
    or an error saying which Debian package provides it."""
    path = os.pathsep.join(folders) or os.pathsep.join(
        [os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"]
    )
    found = shutil.which(name, path=path)
    if found is None:
        raise RTError(f"{name} not found: install Debian's {package} (make bench-peers does)")
    return found


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports on 127.0.0.1 that were free a moment ago (the kernel's choice,
    so two benches on one machine do not collide)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ServerProcess:
    """One server process: its command, its log file, start and stop."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name, self.argv, self.log_path = name, argv, log_path
        self.env = None if env is None else {**os.environ, **env}
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # its own process group, stopped as one
            )

    def exited(self) -> int | None:
        """Its exit status if it has exited, else None."""
        return None if self.proc is None else self.proc.poll()

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to its process group, SIGKILL after ``grace_s``; waits for it."""
        if self.proc is None:
            return
        group = self.proc.pid  # start_new_session: the group's id is the leader's pid
        _signal_group(group, signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(group, signal.SIGKILL)
            self.proc.wait()
        deadline = time.monotonic() + grace_s
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.05)  # helpers that outlive the leader for a moment
        if _group_alive(group):
            _signal_group(group, signal.SIGKILL)
        self.proc = None


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def wait_ready(
    what: str, ready: Callable[[], bool], servers: Iterable[ServerProcess], timeout_s: float
) -> None:
    """Poll ``ready`` until it is true; fail at once if a server exits, or at the
    deadline, quoting the servers' logs."""
    servers = list(servers)
    deadline = time.monotonic() + timeout_s
    while True:
        for server in servers:
            status = server.exited()
            if status is not None:
                raise RTError(
                    f"{server.name} exited with status {status} while waiting for {what}; "
                    f"its log ({server.log_path}) ends:\n{server.log_tail()}"
                )
        with contextlib.suppress(Exception):  # not ready yet, in whatever way
            if ready():
                return
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {s.name}:\n{s.log_tail()}" for s in servers)
            raise RTError(f"no {what} within {timeout_s:g} s; logs end:\n{logs}")
        time.sleep(0.1)


def sessions_cpu_seconds(sessions: Iterable[int]) -> float:
    """User and system CPU seconds so far of every process in ``sessions`` (a server
    started in a session of its own, with the helpers it started, such as Erlang's)."""
    wanted, total, ticks = set(sessions), 0, os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[3]) in wanted:  # the session id
            total += int(fields[11]) + int(fields[12])
    return total / ticks


class ServerGroup:
    """The servers of one peer, started in steps, each step waited for; all stopped at
    the end, whether or not they were started or became ready."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s  # for each readiness check
        self._steps: list[list[ServerProcess]] = []

    def start(self, *servers: ServerProcess) -> None:
        """Start ``servers``, in this order, as one step."""
        self._steps.append(list(servers))  # first, so that a failed start is still stopped
        for server in servers:
            server.start()

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        """:func:`wait_ready` on every server started so far."""
        wait_ready(what, ready, self._latest_first(), self.timeout_s)

    def cpu_seconds(self) -> float:
        """CPU seconds so far of every server process and its helpers."""
        sessions = [s.proc.pid for s in self._latest_first() if s.proc is not None]
        return sessions_cpu_seconds(sessions)

    def stop(self) -> None:
        """Stop every server, the latest step's first: it may depend on an earlier one."""
        for server in self._latest_first():
            server.stop()

    def _latest_first(self) -> list[ServerProcess]:
        """The latest step's servers first (the likeliest to fail, so quoted first),
        then the earlier steps', each step in its own order."""
        return [server for step in reversed(self._steps) for server in step]
