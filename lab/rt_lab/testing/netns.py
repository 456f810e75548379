"""A separate network host for tests: a network namespace joined to this one by a veth pair.

Needs root. The namespace gets ``10.<a>.<b>.2`` and this side ``.1``; cutting the
link (``cut``) takes the host-side interface down, as a pulled cable would: no
packets, no resets; ``heal`` brings it back. ``drop_outgoing`` loses what the host
sends and nothing it receives (a ``tc`` queue of length 0).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["NetnsHost", "enable_forwarding", "restore_forwarding"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class NetnsHost:
    """One namespace with a veth link to the root namespace."""

    def __init__(self, tag: int) -> None:
        pid = os.getpid() % 10000
        self.name = f"rt{pid}n{tag}"
        self.host_if, self.ns_if = f"rt{pid}h{tag}", f"rt{pid}p{tag}"
        subnet = f"10.{200 + tag}.{pid % 250}"
        self.local_address, self.address = f"{subnet}.1", f"{subnet}.2"
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.local_address}/24", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            self.exec_("ip", "addr", "add", f"{self.address}/24", "dev", self.ns_if)
            self.exec_("ip", "link", "set", self.ns_if, "up")
            self.exec_("ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @property
    def prefix(self) -> list[str]:
        """Prepend to a command to run it inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def exec_(self, *command: str) -> None:
        subprocess.run([*self.prefix, *command], check=True, capture_output=True, text=True)

    def route_via_host(self) -> None:
        """Send everything not on the link through this namespace's side of the veth, so
        hosts in different namespaces reach each other through the root namespace (which
        must forward: see :func:`enable_forwarding`)."""
        self.exec_("ip", "route", "add", "default", "via", self.local_address)

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def drop_outgoing(self) -> None:
        """Lose every packet this host sends (its peers' still arrive): a one-way
        partition, where the peers' TCP sees no acknowledgements and backs off."""
        # a queue that holds nothing drops everything (netem may not be in the kernel)
        self.exec_("tc", "qdisc", "add", "dev", self.ns_if, "root", "pfifo", "limit", "0")

    def restore_outgoing(self) -> None:
        self.exec_("tc", "qdisc", "del", "dev", self.ns_if, "root")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
_USERS = Path("/run/rt-netns-forwarding")  # one file per process that needs forwarding on


def enable_forwarding() -> str:
    """Turn on IPv4 forwarding in the root namespace; returns the value to restore.

    Several runs may need it at once (a test, a chaos run); each registers itself, and
    :func:`restore_forwarding` puts the value back only when the last one leaves, so one
    finishing does not cut the others' namespaces off."""
    before = _FORWARD.read_text().strip()
    _USERS.mkdir(parents=True, exist_ok=True)
    if not _live_users():
        (_USERS / "original").write_text(before)
    (_USERS / str(os.getpid())).write_text(before)
    _FORWARD.write_text("1\n")
    return (_USERS / "original").read_text().strip()


def restore_forwarding(value: str) -> None:
    (_USERS / str(os.getpid())).unlink(missing_ok=True)
    if not _live_users():
        _FORWARD.write_text(value + "\n")


def _live_users() -> list[int]:
    live = []
    for entry in _USERS.glob("[0-9]*"):
        pid = int(entry.name)
        if pid != os.getpid() and Path(f"/proc/{pid}").exists():
            live.append(pid)
    return live
