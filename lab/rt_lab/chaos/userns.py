"""``rt chaos`` without root: the run moves into a user namespace of its own.

Partitions need network namespaces and full disks a filesystem of their own; both are
root's. Where the kernel lets any user make a user namespace (``unshare --user
--map-root-user``), the run re-executes itself inside one, together with a network
namespace and a mount namespace. There it is root over what it made: it can make a
namespace per node joined by veth links (real separate hosts, as under root) and mount
a tmpfs per node. It cannot attach loop devices, so ``power-loss`` is left out and full
disks are tmpfs. Nothing outside changes: the network it sees starts empty (only its
own loopback, brought up here) and its mounts vanish with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import NoReturn

from rt_lab.chaos.world import RELAYS, means

__all__ = ["INSIDE_ENV", "inside", "prepare", "reexec", "unavailable", "wanted"]

INSIDE_ENV = "RT_CHAOS_USERNS"  # set in the re-executed run
_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--mount"]


def inside() -> bool:
    return os.environ.get(INSIDE_ENV) == "1"


def wanted(faults: Iterable[str], partitions: str = "auto") -> bool:
    """Whether a run with ``faults`` should move into a user namespace: not root, not
    there yet, and asked for a fault that needs one (partitions through relays do not)."""
    needing = [f for f in faults if set(means(f, partitions)) - {RELAYS}]
    return os.geteuid() != 0 and not inside() and bool(needing)


def unavailable() -> str | None:
    """Why a user namespace cannot be made here, or None if it can."""
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    done = subprocess.run([*_UNSHARE, "true"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"user namespaces are not allowed here: {done.stderr.strip()[:200]}"
    return None


def reexec(argv: Sequence[str]) -> NoReturn:
    """Run ``python -m rt_appliance.cli *argv`` in a new user namespace, in place of this
    process."""
    env = {**os.environ, INSIDE_ENV: "1"}
    command = [*_UNSHARE, "--", sys.executable, "-m", "rt_appliance.cli", *argv]
    os.execvpe(command[0], command, env)


def prepare() -> None:
    """Inside: a private /run (for ``ip netns`` and the forwarding registry) and a
    loopback that is up (the publishers and subscribers bind to 127.0.0.x)."""
    subprocess.run(["mount", "-t", "tmpfs", "rt-chaos-run", "/run"], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
