"""Leases: one job for the whole stream, on one node at a time, granted through raft.

A job that must run once per stream, not once per node (the Spark pipeline whose
checkpoint and output live on shared storage), runs on every node but works only
where it holds the lease. The files of a node, in ``<data_dir>/leases/``::

    <name>.want     the job touches it twice a second while it runs and wants the lease
    <name>.json     the node writes the committed lease there: holder, until (ns)

The node reports its fresh wants to the leader with its control reports. The leader
(:func:`decide`) grants a free or expired lease to a node that wants it (the last
holder first), and renews the holder's once half its term is gone; raft commits each
grant (:class:`~rt_appliance.sequencer.state.Lease`) and refuses one that would take a
lease another node still holds. A holder whose node dies, or whose job stops wanting
it, is not renewed: the lease expires and another node's job takes it.

The job trusts its lease only until ``until`` less a margin (:class:`LeaseView`), so
it has stopped before the leader's clock lets another node take the lease; the nodes'
clocks must agree to within that margin (NTP does).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rt_appliance.clock import wall_ns
from rt_appliance.sequencer.state import Lease

__all__ = [
    "LEASES_DIR",
    "LeaderWants",
    "LeaseState",
    "LeaseView",
    "decide",
    "give_up",
    "lease_file",
    "read_lease",
    "read_wants",
    "want",
    "want_file",
    "write_lease",
]

log = logging.getLogger(__name__)

LEASES_DIR = "leases"
WANT_FRESH_S = 3.0  # a want file touched longer ago than this is a job that stopped


def want_file(data_dir: Path, name: str) -> Path:
    return data_dir / LEASES_DIR / f"{name}.want"


def lease_file(data_dir: Path, name: str) -> Path:
    return data_dir / LEASES_DIR / f"{name}.json"


def want(data_dir: Path, name: str) -> None:
    """Say (again) that this node's job wants lease ``name``: touch its want file."""
    path = want_file(data_dir, name)
    try:
        os.utime(path)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def give_up(data_dir: Path, name: str) -> None:
    """The job stops: its node no longer asks for the lease (once its want goes stale,
    if the file cannot be removed)."""
    try:
        want_file(data_dir, name).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("leases: cannot remove %s: %s", want_file(data_dir, name), exc)


def read_wants(data_dir: Path, now: float | None = None) -> list[str]:
    """The leases this node's jobs want: want files touched in the last WANT_FRESH_S."""
    now = time.time() if now is None else now
    directory = data_dir / LEASES_DIR
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    except OSError as exc:  # not a directory, not readable: no job can want through it
        log.warning("leases: cannot read %s: %s", directory, exc)
        return []
    wanted = []
    for entry in entries:
        if not entry.name.endswith(".want"):
            continue
        try:
            fresh = now - entry.stat().st_mtime < WANT_FRESH_S
        except OSError:  # gone since listed
            continue
        if fresh:
            wanted.append(entry.name.removesuffix(".want"))
    return sorted(wanted)


def write_lease(data_dir: Path, name: str, lease: dict[str, Any] | None) -> None:
    """Write the committed lease ``name`` for the node's job (atomically)."""
    path = lease_file(data_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"name": name, **(lease or {"holder": None, "until": 0})}))
    os.replace(tmp, path)


def read_lease(data_dir: Path, name: str) -> dict[str, Any] | None:
    """The committed lease as the node last wrote it; None before it wrote one."""
    try:
        doc = json.loads(lease_file(data_dir, name).read_text())
    except (OSError, ValueError):  # none yet, torn, or unreadable: not a lease to trust
        return None
    return doc if isinstance(doc, dict) else None


class LeaderWants:
    """The leader's view of which node wants which lease: its own files, and the others'
    reports, each counted while reports keep coming (``fresh_s``)."""

    def __init__(self, me: str, fresh_s: float) -> None:
        self.me, self.fresh_s = me, fresh_s
        self._reported: dict[str, tuple[float, list[str]]] = {}

    def report(self, node: str, names: list[str], now: float) -> None:
        self._reported[node] = (now, names)

    def wanting(self, own: list[str], now: float) -> dict[str, list[str]]:
        """node -> the leases it wants now (monotonic ``now``)."""
        found = {self.me: own} if own else {}
        for node, (at, names) in self._reported.items():
            if node != self.me and names and now - at < self.fresh_s:
                found[node] = names
        return found


def decide(
    leases: dict[str, dict[str, Any]],
    wanting: dict[str, list[str]],
    now_ns: int,
    ttl_ns: int,
) -> list[Lease]:
    """The grants and renewals the leader proposes now.

    A lease held and still wanted by its holder is renewed once less than half its
    term is left. A lease free or expired goes to a node that wants it: its last
    holder if that one still does (a restarted job continues), else the first by name.
    A holder that no longer wants its lease keeps it until it expires: only then is it
    sure its job has stopped.
    """
    names = sorted({name for wanted in wanting.values() for name in wanted})
    proposed = []
    for name in names:
        nodes = sorted(node for node, wanted in wanting.items() if name in wanted)
        current = leases.get(name)
        held = current is not None and current["until"] > now_ns
        if held and current is not None:
            if current["holder"] in nodes and current["until"] - now_ns < ttl_ns // 2:
                proposed.append(Lease(name, current["holder"], now_ns, now_ns + ttl_ns))
            continue
        last = current["holder"] if current is not None else None
        holder = last if last in nodes else nodes[0]
        assert holder is not None
        proposed.append(Lease(name, holder, now_ns, now_ns + ttl_ns))
    return proposed


@dataclass(frozen=True, slots=True)
class LeaseState:
    """What a job sees of its lease: who holds it, and for how long it may trust it."""

    holder: str | None
    trust_s: float  # this node's job may work for this long yet (0: not its lease)


class LeaseView:
    """A job's view of lease ``name`` on node ``node``, from the node's lease file.

    The job trusts the lease until ``until - margin`` by its own clock: it then stops
    before the leader, judging expiry by its clock, can grant the lease to another.
    """

    def __init__(self, data_dir: Path, node: str, name: str, ttl_s: float) -> None:
        self.data_dir, self.node, self.name = data_dir, node, name
        self.margin_s = ttl_s / 4

    def want(self) -> None:
        want(self.data_dir, self.name)

    def give_up(self) -> None:
        give_up(self.data_dir, self.name)

    def state(self, now: float | None = None) -> LeaseState:
        now = wall_ns() / 1e9 if now is None else now  # the clock the leader judges by
        doc = read_lease(self.data_dir, self.name)
        if doc is None:
            return LeaseState(None, 0.0)
        until = doc.get("until")
        holder = doc.get("holder")
        if not isinstance(until, int) or until / 1e9 <= now:
            return LeaseState(None, 0.0)
        trust = until / 1e9 - self.margin_s - now
        holder = holder if isinstance(holder, str) else None
        mine = holder == self.node and trust > 0
        return LeaseState(holder, trust if mine else 0.0)
