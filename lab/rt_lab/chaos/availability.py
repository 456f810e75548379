"""The availability verdict: a fault one node suffers must not stop the merged stream for
longer than ``--max-stall``, since a majority of healthy nodes can go on without it.

Judged (one node's fault): a kill or pause of one host (a node, a client daemon, an
application), a node's full disk, corruption or clock jump, and a partition that leaves
a majority together (``minority``, ``lone-leader``, ``halves``). Reported only: faults
that take a majority (a power loss of every node, a kill or pause of several nodes) and
partitions raft cannot always lead through (``bridge``, ``one-way``). A fault that began
before the one before it had recovered (merging moved again and every node answered, see
``monitor.recovery_time``) is not judged either: with the node still recovering it takes
two, and its stall is partly the earlier fault's. The other way round, a fault's stall
is counted only up to when the next fault began (``monitor.stall_time``).

After a power loss of every node the verdict also keeps how long merging took to move
again once the nodes were started (``restart_s``), for each power loss that began on a
recovered stream and saw merging move before the next fault began. It is reported, not
judged (the goal is 3 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rt_lab.chaos.nemesis import Injected
from rt_lab.chaos.schedule import Fault, FaultKind

__all__ = ["Availability", "judge_availability", "judged"]

JUDGED_PARTITIONS = frozenset({"minority", "lone-leader", "halves"})


def judged(fault: Fault) -> bool:
    """Whether ``fault`` takes one node at most (the availability verdict judges it)."""
    if fault.kind == FaultKind.POWER_LOSS:
        return False
    if fault.kind == FaultKind.PARTITION:
        return fault.variant in JUDGED_PARTITIONS
    if fault.kind in (FaultKind.KILL, FaultKind.PAUSE):
        return "," not in fault.target
    return True


@dataclass(slots=True)
class Availability:
    max_stall_s: float
    judged: int = 0  # faults judged
    worst_s: float | None = None  # the longest stall among them
    violations: list[str] = field(default_factory=list)
    # after each undisturbed power loss: seconds from the nodes' start to merging again
    restart_s: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def judge_availability(injected: Sequence[Injected], max_stall_s: float) -> Availability:
    """Judge each one-node fault's ``stall_s`` against ``max_stall_s``."""
    verdict = Availability(max_stall_s)
    moved_at: float | None = 0.0  # when merging first moved after the fault before
    recovered_at: float | None = 0.0  # when the stream had recovered from it
    for index, record in enumerate(injected):
        fault = record.fault
        settled = (
            moved_at is not None
            and record.started >= moved_at
            and recovered_at is not None
            and record.started >= recovered_at
        )
        moved_at = record.moved_at
        recovered_at = None if record.recovery_s is None else record.ended + record.recovery_s
        if fault.kind == FaultKind.POWER_LOSS and settled and record.error is None:
            following = injected[index + 1].started if index + 1 < len(injected) else None
            if record.moved_at is not None and (following is None or record.moved_at < following):
                verdict.restart_s.append(round(record.moved_at - record.ended, 2))
        if not judged(fault) or record.error is not None or not settled:
            continue
        verdict.judged += 1
        what = f"{fault.describe()} at {record.started:.1f}s"
        if record.stall_s is None:
            verdict.violations.append(f"{what}: merging never moved again")
            continue
        verdict.worst_s = max(verdict.worst_s or 0.0, record.stall_s)
        if record.stall_s > max_stall_s:
            verdict.violations.append(
                f"{what}: merging stood still {record.stall_s:.1f}s (bound {max_stall_s:.1f}s)"
            )
    return verdict
