"""Telling a peer that keeps refusing the same bytes from a connection that merely failed.

A replication client reconnects after every failure. When a peer accepts the
connection and then refuses the same bytes again and again (a replica it cannot
use, a full disk, a record it will not take), reconnecting at once only fills the
logs. :class:`Refusals` counts connections that ended with the same reason at the
same place with nothing acknowledged in between; after ``limits.STUCK_AFTER`` of them
the connection is *stuck*: the client logs one error naming the file, the offset
and the reason, shows it in its metrics (``rt replication status`` reads them),
and retries at its slowest backoff until the peer takes the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from rt_appliance.limits import STUCK_AFTER
from rt_appliance.position import Position

__all__ = ["Refusals", "Stuck"]


@dataclass(frozen=True, slots=True)
class Stuck:
    """Where a connection is stuck: the directory, the position the peer will not pass,
    and the reason it gives."""

    dir: str
    position: Position | None  # None: refused before the peer said where to resume
    reason: str

    @property
    def file(self) -> str:
        p = self.position
        return "-" if p is None else f"log.{p.session}.{p.roll}"

    @property
    def offset(self) -> str:
        return "-" if self.position is None else str(self.position.offset)

    def describe(self) -> str:
        if self.position is None:
            return f"{self.dir} (refused before resuming): {self.reason}"
        return f"{self.dir}/{self.file} offset {self.offset}: {self.reason}"


class Refusals:
    """Counts identical refusals in a row for one connection slot."""

    def __init__(self, threshold: int = STUCK_AFTER) -> None:
        self.threshold = threshold
        self.count = 0
        self.stuck: Stuck | None = None
        self._last: Stuck | None = None

    def refused(self, where: Stuck) -> bool:
        """A connection ended with ``where``; True if this makes the slot stuck (only once)."""
        self.count = self.count + 1 if where == self._last else 1
        self._last = where
        if self.count >= self.threshold and self.stuck is None:
            self.stuck = where
            return True
        return False

    def progressed(self) -> Stuck | None:
        """The peer acknowledged new bytes: start counting again; returns what was stuck."""
        was, self.stuck, self._last, self.count = self.stuck, None, None, 0
        return was
