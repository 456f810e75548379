"""The stream of a chaos run and everything around it, on this machine.

* every daemon of a :class:`~rt_lab.testing.stream.LocalStream` (push server,
  sequencer and pull server per node; a push client per publisher host, a pull
  client per subscriber host);
* the applications of :mod:`rt_lab.chaos.apps`: one publisher per publisher
  host (two on plain topics, a redundant pair on ``quotes.dedup``) and one
  subscriber application per subscriber host;
* as root: each node in its own network namespace (:class:`Network`), for
  partitions (where namespaces cannot be made, or asked for: every link through a
  TCP relay, :mod:`.relays`), and each node's data directory on its own loop-mounted ext4
  (:class:`~rt_lab.chaos.disks.LoopDisk`), for full disks and power loss; in a
  user namespace (:mod:`.userns`), where loop devices cannot be had, on a tmpfs
  (:class:`~rt_lab.chaos.disks.TmpfsDisk`), for full disks only;
* a clock skew file per node (:mod:`rt_appliance.clock`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from rt_appliance.clock import SKEW_ENV
from rt_lab.chaos.disks import Disk, LoopDisk, TmpfsDisk
from rt_lab.chaos.partitions import Partitions
from rt_lab.chaos.relays import RelayNetwork, probe_relays
from rt_lab.chaos.schedule import FaultKind, Load
from rt_lab.testing.cluster import Daemon
from rt_lab.testing.netns import NetnsHost, enable_forwarding, restore_forwarding
from rt_lab.testing.stream import LocalStream

__all__ = [
    "PARTITION_MODES",
    "RELAYS",
    "ROOT_FAULTS",
    "Network",
    "World",
    "available_faults",
    "means",
]

NETNS = "network namespaces"
RELAYS = "TCP relays"
LOOP = "a loop-mounted filesystem"
TMPFS = "a tmpfs of its own"
# what each fault needs beyond the stream itself: any one of them will do (the first
# is preferred); all but the relays need root, or the root of a user namespace
ROOT_FAULTS: dict[FaultKind, tuple[str, ...]] = {
    FaultKind.PARTITION: (NETNS, RELAYS),
    FaultKind.DISK_FULL: (LOOP, TMPFS),
    FaultKind.POWER_LOSS: (LOOP,),
}
# how partitions are made: auto (namespaces where they can be made, else relays)
PARTITION_MODES = {"auto": (NETNS, RELAYS), "namespaces": (NETNS,), "relays": (RELAYS,)}
DISK_BYTES = 2 << 30  # each node's filesystem (a sparse image)
TMPFS_BYTES = 1 << 30  # each node's tmpfs (memory, as it fills)
NETNS_TAG = 30  # namespaces get tags NETNS_TAG + 1 ...


def means(fault: str, partitions: str = "auto") -> tuple[str, ...]:
    """What ``fault`` can be made with beyond the stream itself (any one will do, the
    first is preferred); empty if it needs nothing more."""
    if FaultKind(fault) is FaultKind.PARTITION:
        return PARTITION_MODES[partitions]
    return ROOT_FAULTS.get(FaultKind(fault), ())


def available_faults(
    wanted: Iterable[str], partitions: str = "auto"
) -> tuple[list[str], dict[str, str]]:
    """(faults this machine can inject, {fault: why not} for the others): root (or the
    root of a user namespace), the tools, and a namespace and a mount actually made,
    are each checked once. ``partitions``: a key of :data:`PARTITION_MODES`."""
    ok, missing = [], {}
    for fault in wanted:
        needs = means(fault, partitions)
        if not needs:
            ok.append(fault)
            continue
        why = [probe(need) for need in needs]
        if any(reason is None for reason in why):
            ok.append(fault)
        else:
            missing[fault] = "; ".join(str(reason) for reason in why)
    return ok, missing


@functools.cache
def probe(need: str) -> str | None:
    """Why ``need`` cannot be made here, or None if it can."""
    if need == RELAYS:
        return probe_relays()
    if os.geteuid() != 0:
        return f"needs root for {need}"
    try:
        if need == NETNS:
            if shutil.which("ip") is None:
                return "needs iproute2 (ip)"
            name = f"rtprobe{os.getpid()}"
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
            subprocess.run(["ip", "netns", "del", name], check=True, capture_output=True)
            return None
        with tempfile.TemporaryDirectory(prefix="rt-chaos-probe-") as tmp:
            if need == TMPFS:
                TmpfsDisk(Path(tmp) / "mnt", 16 << 20).close()
                return None
            if shutil.which("mkfs.ext4") is None:
                return "needs mkfs.ext4 (e2fsprogs)"
            LoopDisk(Path(tmp) / "probe.img", Path(tmp) / "mnt", 16 << 20).close()
        return None
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or str(exc)
        text = detail.decode(errors="replace") if isinstance(detail, bytes) else detail
        return f"cannot make {need} here: {text.strip()[:200]}"


class Network(Partitions):
    """One network namespace per node, joined through this one; partitions between
    nodes are blackhole routes inside the namespaces, a node cut off from everything
    has its link down."""

    def __init__(self, names: list[str]) -> None:
        self.forwarding = enable_forwarding()
        self.hosts: dict[str, NetnsHost] = {}
        self._blocked: set[tuple[str, str]] = set()
        self._cut: set[str] = set()
        try:
            for i, name in enumerate(names, start=1):
                self.hosts[name] = NetnsHost(NETNS_TAG + i)
                self.hosts[name].route_via_host()
        except BaseException:
            self.close()
            raise

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def block(self, src: str, dst: str) -> None:
        """Drop what ``src`` sends to ``dst`` (one way)."""
        if (src, dst) not in self._blocked:
            self.hosts[src].exec_("ip", "route", "add", "blackhole", f"{self.address(dst)}/32")
            self._blocked.add((src, dst))

    def cut(self, name: str) -> None:
        """Unplug node ``name`` from everything (its clients too)."""
        self.hosts[name].cut()
        self._cut.add(name)

    def heal(self) -> None:
        for src, dst in sorted(self._blocked):
            with contextlib.suppress(subprocess.CalledProcessError):
                self.hosts[src].exec_("ip", "route", "del", "blackhole", f"{self.address(dst)}/32")
        self._blocked.clear()
        for name in sorted(self._cut):
            self.hosts[name].heal()
        self._cut.clear()

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
        restore_forwarding(self.forwarding)


class World:
    """Everything a chaos run acts on. ``faults``: the faults of the run (decides
    whether namespaces, relays and loop disks are made); ``partitions``: how partitions
    are made (a key of :data:`PARTITION_MODES`)."""

    def __init__(
        self,
        work: Path,
        nodes: int,
        faults: Iterable[str],
        rate: float,
        load: Load,
        partitions: str = "auto",
    ) -> None:
        self.work, self.load, self.rate = work, load, rate
        faults = set(faults)
        names = [f"rt-{i}" for i in range(1, nodes + 1)]
        self.journals = work / "journals"
        self.journals.mkdir(parents=True, exist_ok=True)
        self.network: Partitions | None = None
        self.disks: dict[str, Disk] = {}
        self.clock_files = {n: work / "clock" / n for n in names}
        self.apps: dict[str, Daemon] = {}
        self.epoch = time.time()
        self._stack = contextlib.ExitStack()
        try:
            for path in self.clock_files.values():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("0\n")
            extra: dict[str, object] = {
                "sequencer": {
                    "merged_roll_bytes": "4MiB",
                    "max_range_bytes": "256KiB",
                    "scrub_interval_ms": 1000,  # damage is found within seconds
                },
                "replication": {"reconnect_initial_ms": 50, "reconnect_max_ms": 1000},
            }
            relays = FaultKind.PARTITION in faults and (
                partitions == "relays" or (partitions == "auto" and probe(NETNS) is not None)
            )
            if FaultKind.PARTITION in faults and not relays:
                self.network = Network(names)
                self._stack.callback(self.network.close)
                extra["nodes"] = [{"name": n, "host": self.network.address(n)} for n in names]
            if faults & {FaultKind.DISK_FULL, FaultKind.POWER_LOSS}:
                loop = FaultKind.POWER_LOSS in faults or probe(LOOP) is None
                for n in names:
                    disk = (
                        LoopDisk(work / "disks" / f"{n}.img", work / "data" / n, DISK_BYTES)
                        if loop
                        else TmpfsDisk(work / "data" / n, TMPFS_BYTES)
                    )
                    self.disks[n] = disk
                    self._stack.callback(disk.close)
            publishers = {h: [f"t{i}"] for i, h in enumerate(load.publishers, start=1)}
            publishers.update({h: ["quotes.dedup"] for h in load.dedup_pair})
            prefixes = {n: self.network.hosts[n].prefix for n in names} if self.network else {}
            self.stream = LocalStream(
                work,
                nodes,
                publishers,
                list(load.subscribers),
                extra,
                prefixes=prefixes,
                environments={n: {SKEW_ENV: str(p)} for n, p in self.clock_files.items()},
            )
            self._stack.callback(self.stream.stop)
            if relays:
                self.network = RelayNetwork(self.stream.config)
                self._stack.callback(self.network.close)
                for host in self.stream.config.all_hosts():
                    self.stream.set_view(host.name, self.network.view(host.name))
        except BaseException:
            self._stack.close()
            raise

    # -- the applications ----------------------------------------------------------------

    def topic_of(self, host: str) -> str:
        return self.stream.config.publisher(host).topics[0]

    def journal(self, host: str) -> Path:
        return self.journals / f"{host}.journal"

    def app(self, host: str) -> Daemon:
        """The publisher or subscriber application of ``host``."""
        if host not in self.apps:
            if host in self.load.subscribers:
                args = ["subscribe", "--dir", str(self.stream.subscriber_dir(host))]
            else:
                args = [
                    "publish",
                    "--root",
                    str(self.stream.publisher_root(host)),
                    "--topic",
                    self.topic_of(host),
                    "--host",
                    host,
                    "--rate",
                    str(self.rate),
                    "--epoch",
                    str(self.epoch),
                ]
            args += ["--journal", str(self.journal(host))]
            program = [sys.executable, "-m", "rt_lab.chaos.apps"]
            self.apps[host] = Daemon(f"app-{host}", args, self.stream.log_dir, program=program)
        return self.apps[host]

    def start(self) -> None:
        self.stream.start()
        self.epoch = time.time()
        for host in (*self.load.subscribers, *self.load.publisher_hosts):
            self.app(host).start()

    def stop_publishers(self) -> None:
        for host in self.load.publisher_hosts:
            self.app(host).stop()

    def close(self) -> None:
        for app in self.apps.values():
            app.stop()
        self._stack.close()
