"""Injects the faults of a schedule into a :class:`~rt_lab.chaos.world.World`.

Each fault starts, lasts its duration, and is undone (restart, resume, heal, clock
back, room given back) even when the run is interrupted. What it did, to whom and
when is kept as an :class:`Injected` for the report.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import leader_of
from rt_lab.chaos.disks import LoopDisk
from rt_lab.chaos.schedule import Fault
from rt_lab.chaos.world import World
from rt_lab.testing.cluster import Daemon
from rt_lab.testing.stream import NODE_ROLES

__all__ = ["Injected", "Nemesis"]

BLOCK = 4096  # bytes a "zero" corruption overwrites


@dataclass(slots=True)
class Injected:
    """A fault as it happened: started and ended in seconds since the run started."""

    fault: Fault
    started: float
    ended: float = 0.0
    did: str = ""
    error: str | None = None  # the fault could not be injected (why)
    recovery_s: float | None = None
    stall_s: float | None = None  # the longest merging stood still around it (monitor.py)
    moved_at: float | None = None  # when merging first moved after it ended (None: never)
    notes: list[str] = field(default_factory=list)


class Nemesis:
    def __init__(self, world: World, seed: int, t0: float, stop: threading.Event) -> None:
        self.world, self.seed, self.t0, self.stop = world, seed, t0, stop
        self.stream = world.stream
        self.injected: list[Injected] = []
        self._current: Injected | None = None  # the fault being injected

    def _now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def inject(self, index: int, fault: Fault) -> Injected:
        """Run ``fault`` from start to end; returns what happened."""
        record = Injected(fault, self._now())
        self.injected.append(record)
        self._current = record
        rng = random.Random(f"{self.seed}:{index}")  # choices made while injecting
        action = getattr(self, "_" + fault.kind.replace("-", "_"))
        try:
            action(fault, record, rng)
        except Exception as exc:  # the run goes on; the report says what failed
            record.error = f"{type(exc).__name__}: {exc}"
        record.ended = self._now()
        return record

    def _hold(self, seconds: float) -> None:
        self.stop.wait(seconds)

    # -- targets -----------------------------------------------------------------------

    def _leader(self) -> str:
        leader = leader_of(self.stream.node_status(timeout_s=2.0))
        if self._current is not None:  # the fault starts once its target is known: asking
            self._current.started = self._now()  # a node that does not answer takes 2 s
        return leader or self.stream.node_names[0]

    def _nodes(self, target: str) -> list[str]:
        return [self._leader() if t == "leader" else t for t in target.split(",")]

    def _daemons(self, fault: Fault) -> list[Daemon]:
        variant = fault.variant
        if variant in NODE_ROLES or variant == "node":  # each a part of the node's process
            return [self.stream.node_daemon(n) for n in self._nodes(fault.target)]
        if variant == "push-client":
            return [self.stream.publisher_daemon(fault.target)]
        if variant == "pull-client":
            return [self.stream.subscriber_daemon(fault.target)]
        return [self.world.app(fault.target)]  # publisher, subscriber

    # -- the faults --------------------------------------------------------------------

    def _kill(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        daemons = [d for d in self._daemons(fault) if d.running]
        record.did = "SIGKILL " + ", ".join(d.name for d in daemons)
        for d in daemons:
            d.kill(signal.SIGKILL)
        try:
            self._hold(fault.duration_s)
        finally:
            for d in daemons:
                d.start()

    def _pause(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        daemons = [d for d in self._daemons(fault) if d.running]
        record.did = "SIGSTOP " + ", ".join(d.name for d in daemons)
        for d in daemons:
            d.send(signal.SIGSTOP)
        try:
            self._hold(fault.duration_s)
        finally:
            for d in daemons:
                d.send(signal.SIGCONT)

    def _partition(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        network = self.world.network
        if network is None:
            raise RuntimeError("no network (namespaces or relays) in this run")
        names = self.stream.node_names
        shape, target = fault.variant, fault.target
        if shape == "minority":
            network.cut(target)
            record.did = f"{target} unplugged"
        elif shape == "lone-leader":
            leader = self._leader()
            network.split([leader], [n for n in names if n != leader])
            record.did = f"leader {leader} cut off from the other nodes"
        elif shape == "one-way":
            src, dst = target.split(">")
            network.block(src, dst)
            record.did = f"{src} cannot send to {dst}"
        else:  # halves, bridge
            sides = target.split(" via ")[0].split("|")
            network.split(sides[0].split(","), sides[1].split(","))
            record.did = f"{sides[0]} | {sides[1]}" + (
                f", {target.split(' via ')[1]} sees both" if " via " in target else ""
            )
        try:
            self._hold(fault.duration_s)
        finally:
            network.heal()

    def _clock(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        path = self.world.clock_files[fault.target]
        _write(path, int(fault.value * 1e9))
        record.did = f"{fault.target}'s clock {fault.value:+.2f}s"
        try:
            self._hold(fault.duration_s)
        finally:
            _write(path, 0)

    def _corrupt(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        mode, where = fault.variant.split(":")
        node = fault.target
        if where == "merged":
            dirs = [self.stream.merged_dir(node)]
        else:
            dirs = sorted(p for p in (self.stream.data_dir(node) / "in").glob("*") if p.is_dir())
        files = [f.path for d in dirs for f in list_files(d)] if dirs else []
        if not files:
            record.did = f"nothing to corrupt in {node}'s {where}"
            return
        path = rng.choice(files)
        size = path.stat().st_size
        if size == 0:
            record.did = f"{path} is empty"
            return
        at = min(size - 1, int(fault.value * size))
        record.did = _damage(path, mode, at, size)

    def _disk_full(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        disk = self.world.disks[fault.target]
        taken = disk.fill()
        record.did = f"{fault.target}'s disk filled ({taken >> 20} MiB of ballast)"
        try:
            self._hold(fault.duration_s)
        finally:
            disk.drain()

    def _power_loss(self, fault: Fault, record: Injected, rng: random.Random) -> None:
        disks = [d for d in self.world.disks.values() if isinstance(d, LoopDisk)]
        if not disks or len(disks) != len(self.world.disks):
            raise RuntimeError("power loss needs every node on a loop-mounted disk")
        names = self.stream.node_names
        daemons = [d for d in map(self.stream.node_daemon, names) if d.running]
        for d in daemons:
            d.send(signal.SIGSTOP)  # every node at the same instant
        try:
            for disk in disks:
                disk.snapshot()
        finally:
            for d in daemons:
                d.kill(signal.SIGKILL)
        for disk in disks:
            disk.restore()
        record.did = f"power lost on {', '.join(names)}: unsynced writes gone"
        self._hold(fault.duration_s)
        for n in names:
            self.stream.start_node(n)

    def undo_all(self) -> None:
        """Leave nothing broken (an interrupted run): resume, heal, clocks back, room back,
        and start whatever is not running."""
        for d in [*self.stream.daemons.values(), *self.world.apps.values()]:
            d.send(signal.SIGCONT)
        if self.world.network is not None:
            self.world.network.heal()
        for path in self.world.clock_files.values():
            _write(path, 0)
        for disk in self.world.disks.values():
            disk.drain()


def _write(path: Path, value: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def _damage(path: Path, mode: str, at: int, size: int) -> str:
    """Flip a bit, truncate, or zero a block of ``path`` at byte ``at``; says what it did."""
    if mode == "truncate":
        os.truncate(path, at)
        return f"truncated {path} to {at} of {size} bytes"
    with open(path, "r+b") as f:
        f.seek(at)
        if mode == "flip":
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x10]))
            return f"flipped a bit of byte {at} of {path}"
        f.write(bytes(min(BLOCK, size - at)))
        return f"zeroed {min(BLOCK, size - at)} bytes at {at} of {path}"
