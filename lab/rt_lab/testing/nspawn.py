"""Containers that boot a real systemd, for testing the packages and units (root only).

:func:`rootfs` makes a Debian bookworm tree once (``debootstrap --variant=minbase`` with
systemd, dbus, python3 and iproute2) and keeps it in :data:`CACHE_DIR`, outside any
checkout. :class:`Container` boots it with ``systemd-nspawn --boot --volatile=overlay``
(the tree stays untouched; every write goes to a tmpfs layer thrown away at the end),
waits until systemd says it is running, runs commands in it through ``nsenter``, and
powers it off. This machine has no systemd of its own, so each container is
started with ``--register=no --keep-unit`` from a cgroup of its own (without one, two
containers would share nspawn's ``payload`` cgroup).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["CACHE_DIR", "Container", "nspawn_missing", "rootfs"]

CACHE_DIR = Path(os.environ.get("RT_TEST_CACHE", "/var/cache/rt-appliance-tests"))
MIRROR = "http://deb.debian.org/debian"
PACKAGES = "systemd,systemd-sysv,dbus,python3,iproute2"
_CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))


def nspawn_missing() -> str | None:
    """Why containers cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, dpkg, network namespaces)"
    for tool, package in (("systemd-nspawn", "systemd-container"), ("debootstrap", "debootstrap")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package})"
    return None


def rootfs() -> Path:
    """The cached bookworm tree, made on first use (about a minute)."""
    tree = CACHE_DIR / "rootfs-bookworm"
    if (tree / "usr/lib/systemd/systemd").exists():
        return tree
    tmp = CACHE_DIR / "rootfs-bookworm.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(tmp), MIRROR],
        check=True,
        capture_output=True,
        timeout=900,
    )
    tmp.rename(tree)
    return tree


# what a root shell in the container starts with (its systemd's default PATH)
_CONTAINER_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
}


class Container:
    """One booted container; use as a context manager."""

    def __init__(
        self,
        name: str,
        log_dir: Path,
        *,
        binds: dict[Path, str] | None = None,
        shared: dict[Path, str] | None = None,
        netns: str | None = None,
    ) -> None:
        """``binds``: directories of this machine seen read-only inside; ``shared``:
        seen writable (storage several containers mount, as NFS)."""
        self.name = name
        self.log_path = log_dir / f"nspawn-{name}.log"
        self._binds = binds or {}
        self._shared = shared or {}
        self._netns = netns
        self._process: subprocess.Popen[bytes] | None = None
        self.pid = 0  # the container's PID 1 (systemd), as this machine sees it

    def __enter__(self) -> Container:
        self.boot()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root(self) -> Path:
        """The container's / as seen from here (write files into it through this)."""
        return Path(f"/proc/{self.pid}/root")

    def _cgroups(self) -> list[Path]:
        return [root / f"rt-test-{self.name}" for root in _CGROUP_ROOTS if root.is_dir()]

    def boot(self, timeout_s: float = 60.0) -> None:
        argv = [
            "systemd-nspawn",
            f"--directory={rootfs()}",
            "--boot",
            "--register=no",
            "--keep-unit",
            "--volatile=overlay",
            "--console=pipe",
            f"--machine={self.name}",
            f"--hostname={self.name}",
        ]
        argv += [f"--network-namespace-path=/run/netns/{self._netns}"] if self._netns else []
        argv += ["--private-network"] if not self._netns else []
        argv += [f"--bind-ro={src}:{dst}" for src, dst in self._binds.items()]
        argv += [f"--bind={src}:{dst}" for src, dst in self._shared.items()]
        cgroups = self._cgroups()
        for cgroup in cgroups:
            cgroup.mkdir(exist_ok=True)

        def enter_cgroups() -> None:
            for cgroup in cgroups:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=enter_cgroups
            )
        self.pid = self._find_init(timeout_s)
        self._wait_running(timeout_s)
        self._name_itself()

    def _name_itself(self) -> None:
        """Name the container as an installed Debian names itself: /etc/hostname and
        /etc/hosts. debootstrap copies this machine's /etc/hostname into the tree, so at
        boot the container took this machine's name, which nothing inside resolves
        (Java's InetAddress.getLocalHost, and with it Spark, fails on it)."""
        (self.root / "etc/hostname").write_text(f"{self.name}\n")
        self.run("hostname", self.name)
        (self.root / "etc/hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{self.name}\n")

    def _find_init(self, timeout_s: float) -> int:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited: {self.log_path.read_text()[-2000:]}")
            for pid in _descendants(self._process.pid):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                        return pid
            time.sleep(0.1)
        raise TimeoutError(f"container {self.name}: no systemd within {timeout_s}s")

    def _wait_running(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.2)
        raise TimeoutError(f"container {self.name}: systemd is {state!r} after {timeout_s}s")

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout_s: float = 120.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container (all its namespaces), as root, with an
        environment of its own: nsenter passes on its caller's, and a variable this test
        process set (PYSPARK_PYTHON naming this machine's venv, say) would change what
        runs inside."""
        result = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", "--", *argv],
            env=_CONTAINER_ENV,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            input=input_text,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"in {self.name}: {' '.join(argv)} exited {result.returncode}\n"
                f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
            )
        return result

    def unit_property(self, unit: str, prop: str) -> str:
        return self.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()

    def kill(self) -> None:
        """Kill the container at once, as a machine that dies: nothing in it shuts down."""
        if self._process is not None and self._process.poll() is None:
            # the end of its PID 1 ends every process of its PID namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._process.wait(30)
        self.stop()

    def stop(self) -> None:
        """Power the container off (kill it if that hangs) and remove its cgroups."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(Exception):
                self.run("systemctl", "poweroff", check=False, timeout_s=10)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        for cgroup in self._cgroups():
            _remove_cgroup(cgroup)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            found += [int(c) for c in children]
            todo += [int(c) for c in children]
    return found


def _remove_cgroup(cgroup: Path) -> None:
    if not cgroup.is_dir():
        return
    for child in sorted(cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            with contextlib.suppress(OSError):
                child.rmdir()
    with contextlib.suppress(OSError):
        cgroup.rmdir()
