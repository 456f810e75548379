"""Whether this node can lead: it could write and sync what leading takes, lately, and
held the input a majority holds.

A leader whose disk is full, or fails with EIO, cannot take its publishers' input, write
its merged log or record its heartbeat, while a majority of healthy nodes could go on
merging without it. Each part of the node that writes says so when a write fails
(:meth:`Fitness.failed`); the node is *unfit to lead* from then until
``limits.UNFIT_HOLD_S`` has passed with no further failure. While it is unfit, raft steps
down if it leads and stands for no election (:meth:`RaftNode.set_unfit
<rt_appliance.sequencer.raft.node.RaftNode.set_unfit>`); it still follows, votes and
merges as far as it can, and leads again once it is fit and wins an election.

A leader plans merges from its own copy of the inputs. When that copy lacks bytes that a
majority of nodes hold and has not grown for ``limits.LEADER_INPUT_BEHIND_S`` (its push
server is down, or publishers cannot reach it), or has trailed a majority's for
``limits.LEADER_INPUT_LAGGING_S``, the planner says so (``input_behind``) and the leader
hands over to a follower that holds them.

Thread-safe: the merger reports from its own thread, the servers from the event loop.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rt_appliance.limits import UNFIT_HOLD_S

__all__ = ["CAUSES", "Fitness", "Unfit", "is_write_failure"]

# The errors that say this node's storage cannot take writes (not a bad request or file)
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})

# What failed: the label of rt_sequencer_stepped_down_total and rt status. The first four
# are writes; ``input_behind``: a leader lacks input bytes a majority holds; ``stopping``:
# the node was asked to stop and hands leadership over before it does.
CAUSES = ("input", "merged_log", "heartbeat", "raft_journal", "input_behind", "stopping")


@dataclass(frozen=True, slots=True)
class Unfit:
    cause: str  # one of CAUSES
    why: str  # the error, as the failing part logged it

    def __str__(self) -> str:
        if self.cause == "input_behind":
            return f"its own copy of an input is behind a majority's: {self.why}"
        if self.cause == "stopping":
            return f"it is stopping: {self.why}"
        return f"cannot write its {self.cause.replace('_', ' ')}: {self.why}"


class Fitness:
    """The write failures of the last ``UNFIT_HOLD_S``, by cause."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._failed: dict[str, tuple[float, str]] = {}  # cause -> (when, why), the newest
        self.on_failure: Callable[[], None] | None = None  # told of each failure, any thread

    def failed(self, cause: str, why: str) -> None:
        """A write of ``cause`` failed now (ENOSPC, EIO, ...)."""
        if cause not in CAUSES:
            raise ValueError(f"unknown cause {cause!r}")
        with self._lock:
            self._failed[cause] = (self._clock(), why)
        if self.on_failure is not None:
            self.on_failure()

    def unfit(self) -> Unfit | None:
        """Why this node should not lead now (its newest failure), or None."""
        now = self._clock()
        with self._lock:
            recent = [(when, cause, why) for cause, (when, why) in self._failed.items()]
        recent = [r for r in recent if now - r[0] < UNFIT_HOLD_S]
        if not recent:
            return None
        _, cause, why = max(recent)
        return Unfit(cause, why)


def is_write_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or the OSError it was raised from) says the storage cannot take
    writes: a full disk, a quota, an I/O error, a read-only filesystem."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _STORAGE_ERRNOS:
            return True
        seen = seen.__cause__
    return False
