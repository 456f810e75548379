"""The faults of a chaos run, drawn from a seed: the same seed, the same schedule.

A schedule is a list of :class:`Fault`, one after another with a quiet gap
between them. A fault names its target symbolically ("leader", "rt-2",
"rt-1,rt-3|rt-2"); the nemesis resolves it when the fault starts, so the
schedule depends only on the seed, the number of nodes, the run's length and
the faults chosen.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "FAULTS",
    "Fault",
    "FaultKind",
    "Load",
    "draw_schedule",
    "schedule_from_json",
    "schedule_to_json",
]


class FaultKind(StrEnum):
    KILL = "kill"
    PAUSE = "pause"
    PARTITION = "partition"
    CLOCK = "clock"
    CORRUPT = "corrupt"
    DISK_FULL = "disk-full"
    POWER_LOSS = "power-loss"


FAULTS = tuple(k.value for k in FaultKind)

PARTITIONS = ("halves", "minority", "lone-leader", "bridge", "one-way")
CORRUPTIONS = ("flip", "truncate", "zero")
ELECTION_S = 1.0  # raft's longest election timeout (raft_max_timeout_ms by default)
WARMUP_S = 5.0  # load runs this long before the first fault
GAP_S = (1.0, 5.0)  # quiet time after each fault


@dataclass(frozen=True, slots=True)
class Load:
    """Who runs in a chaos stream (fixed: the schedule draws targets from it)."""

    publishers: tuple[str, ...] = ("pub-1", "pub-2")  # one plain topic each
    dedup_pair: tuple[str, str] = ("pub-a", "pub-b")  # the same messages on a .dedup topic
    subscribers: tuple[str, ...] = ("sub-1", "sub-2")

    @property
    def publisher_hosts(self) -> tuple[str, ...]:
        return (*self.publishers, *self.dedup_pair)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``kind`` on ``target`` from ``at_s`` (seconds after the load starts)
    for ``duration_s``. ``variant`` says how (a partition's shape, a corruption's
    kind and place, a kill of one daemon or of a whole node); ``value`` is a clock
    jump in seconds."""

    at_s: float
    kind: str
    target: str
    variant: str = ""
    duration_s: float = 0.0
    value: float = 0.0

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s

    def describe(self) -> str:
        what = f"{self.kind} {self.variant} {self.target}".replace("  ", " ").strip()
        if self.kind == FaultKind.CLOCK:
            what += f" {self.value:+.1f}s"
        return f"{what} for {self.duration_s:.1f}s" if self.duration_s else what


def _nodes(count: int) -> list[str]:
    return [f"rt-{i}" for i in range(1, count + 1)]


def _some_nodes(rng: random.Random, nodes: list[str], most: int) -> list[str]:
    return sorted(rng.sample(nodes, rng.randint(1, most)))


def _kill_or_pause_target(rng: random.Random, nodes: list[str], load: Load) -> tuple[str, str]:
    """(target, variant): a node daemon, a whole node, several nodes, the leader, or a
    client daemon or application."""
    roll = rng.random()
    if roll < 0.2:
        return "leader", "sequencer"
    if roll < 0.45:
        role = rng.choice(("sequencer", "push-server", "pull-server"))
        return rng.choice(nodes), role
    if roll < 0.6:
        return rng.choice(nodes), "node"
    if roll < 0.7:
        return ",".join(_some_nodes(rng, nodes, len(nodes) // 2 + 1)), "node"
    if roll < 0.8:
        return rng.choice(load.publisher_hosts), "push-client"
    if roll < 0.85:
        return rng.choice(load.subscribers), "pull-client"
    if roll < 0.95:
        return rng.choice(load.publisher_hosts), "publisher"
    return rng.choice(load.subscribers), "subscriber"


def _partition(rng: random.Random, nodes: list[str]) -> tuple[str, str]:
    shape = rng.choice(PARTITIONS)
    shuffled = rng.sample(nodes, len(nodes))
    if shape == "halves":
        cut = len(nodes) // 2
        return f"{','.join(sorted(shuffled[:cut]))}|{','.join(sorted(shuffled[cut:]))}", shape
    if shape == "minority":
        return shuffled[0], shape
    if shape == "lone-leader":
        return "leader", shape
    if shape == "bridge":
        bridge, rest = shuffled[0], shuffled[1:]
        cut = rng.randint(1, len(rest) - 1)
        side_a, side_b = ",".join(sorted(rest[:cut])), ",".join(sorted(rest[cut:]))
        return f"{side_a}|{side_b} via {bridge}", shape
    return f"{shuffled[0]}>{shuffled[1]}", shape  # one-way: the first's packets to the second


def _fault(
    rng: random.Random, kind: str, at: float, nodes: list[str], load: Load, election_s: float
) -> Fault:
    if kind == FaultKind.KILL:
        target, variant = _kill_or_pause_target(rng, nodes, load)
        return Fault(at, kind, target, variant, round(rng.uniform(0.5, 8.0), 2))
    if kind == FaultKind.PAUSE:
        target, variant = _kill_or_pause_target(rng, nodes, load)
        short = rng.random() < 0.5
        low, high = (0.2, election_s) if short else (election_s * 1.5, max(8.0, election_s * 3))
        return Fault(at, kind, target, variant, round(rng.uniform(low, high), 2))
    if kind == FaultKind.PARTITION:
        target, variant = _partition(rng, nodes)
        return Fault(at, kind, target, variant, round(rng.uniform(3.0, 15.0), 2))
    if kind == FaultKind.CLOCK:
        jump = rng.choice((-1, 1)) * 10 ** rng.uniform(-0.5, 2.7)  # 0.3 s .. 500 s
        return Fault(at, kind, rng.choice(nodes), "", round(rng.uniform(2, 15), 2), round(jump, 2))
    if kind == FaultKind.CORRUPT:
        variant = f"{rng.choice(CORRUPTIONS)}:{rng.choice(('in', 'merged'))}"
        return Fault(at, kind, rng.choice(nodes), variant, 0.0, round(rng.random(), 6))
    if kind == FaultKind.DISK_FULL:
        return Fault(at, kind, rng.choice(nodes), "", round(rng.uniform(3.0, 12.0), 2))
    if kind == FaultKind.POWER_LOSS:
        return Fault(at, kind, "all", "", round(rng.uniform(1.0, 4.0), 2))
    raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULTS)}")


def draw_schedule(
    seed: int,
    seconds: float,
    nodes: int,
    faults: list[str],
    election_s: float = 1.0,
    load: Load | None = None,
) -> list[Fault]:
    """The faults of a run of ``seconds`` on ``nodes`` nodes, drawn from ``seed``.

    The first starts after :data:`WARMUP_S`; each ends, then a gap of
    :data:`GAP_S` follows. No fault ends in the last tenth of the run (at least 5 s),
    which is left for recovery under load. ``election_s`` is raft's longest
    election timeout: long pauses outlast it.
    """
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    if nodes < 3 and FaultKind.PARTITION in faults:
        raise ValueError("partitions need at least 3 nodes")
    if not faults:
        return []
    rng = random.Random(seed)
    load = load or Load()
    names = _nodes(nodes)
    last_end = seconds - max(5.0, seconds / 10)
    out: list[Fault] = []
    at = WARMUP_S
    while True:
        fault = _fault(rng, rng.choice(faults), round(at, 2), names, load, election_s)
        if fault.end_s > last_end:
            break
        out.append(fault)
        at = fault.end_s + rng.uniform(*GAP_S)
    return out


def schedule_to_json(schedule: list[Fault]) -> str:
    return json.dumps([asdict(f) for f in schedule], indent=1)


def schedule_from_json(text: str) -> list[Fault]:
    items: list[dict[str, Any]] = json.loads(text)
    return [Fault(**item) for item in items]
