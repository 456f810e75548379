"""A stream on one machine: nodes on 127.0.0.1, .2, .3 ..., certificates, processes.

``write_local_config`` writes an ``rt.yaml`` whose nodes listen on loopback
addresses with the default ports, exactly as separate hosts would, with every
host's data under one work directory, and makes the certificates for it.
``Daemon`` runs one ``rt`` daemon as a real process and stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

__all__ = ["Daemon", "wait_until", "write_local_config"]


def write_local_config(
    work: Path,
    nodes: int = 3,
    publishers: dict[str, list[str]] | None = None,
    subscribers: list[str] | None = None,
    extra: dict[str, object] | None = None,
) -> Path:
    """Write ``work/rt.yaml`` and ``work/tls/``; returns the config path."""
    from rt_appliance.certs import init_for_config
    from rt_appliance.config import load_config

    publishers = publishers if publishers is not None else {"pub-1": ["trades"]}
    subscribers = subscribers if subscribers is not None else ["sub-1"]
    doc: dict[str, object] = {
        "stream": "teststream",
        "data_dir": str(work / "data" / "{name}"),
        "nodes": [{"name": f"rt-{i}", "host": f"127.0.0.{i}"} for i in range(1, nodes + 1)],
        "publishers": [
            {"name": name, "host": f"127.0.1.{i}", "topics": topics}
            for i, (name, topics) in enumerate(publishers.items(), start=1)
        ],
        "subscribers": [
            {"name": name, "host": f"127.0.2.{i}"} for i, name in enumerate(subscribers, start=1)
        ],
        "tls": {"dir": str(work / "tls")},
    }
    doc.update(extra or {})
    path = work / "rt.yaml"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    init_for_config(load_config(path), work / "tls", days=30, force=True)
    return path


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.02
) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class Daemon:
    """One ``rt`` daemon process (``python -m rt_appliance.cli ...``), its output in a log file."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log_dir: Path,
        prefix: list[str] | None = None,
        env: dict[str, str] | None = None,
        program: list[str] | None = None,
    ) -> None:
        self.name, self.args = name, args
        # what runs ``args``: an ``rt`` command unless told otherwise
        self.program = program or [sys.executable, "-m", "rt_appliance.cli", "--log-level", "info"]
        self.prefix = prefix or []  # e.g. ["ip", "netns", "exec", "ns1"]
        self.env = env  # added to this process's environment
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Daemon:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        self.proc = subprocess.Popen(
            [*self.prefix, *self.program, *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **self.env} if self.env else None,
        )
        log.close()
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send(self, sig: int) -> None:
        """Send ``sig`` to the daemon's process group, if it is running (no wait)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited just now
                os.killpg(self.proc.pid, sig)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit within 5 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
