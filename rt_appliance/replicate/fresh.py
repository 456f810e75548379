"""The merged records a node committed last, kept in memory for its pull server.

When a node applies a committed merge that carries its input, it builds the merged
record on its event loop (checked against the commit's size and CRC) and hands it
here; every streaming pull connection whose copy ends exactly where the record starts
sends it at once, from memory, without waiting for the merger's thread to write it and
wake the loop again. The merger writes the same bytes at the same position: the merged
log is byte-identical on every node, and a committed record never changes. A client
that holds such a record before this node's file does is no different from one that
holds it before the sync (see the merger): a node that loses the write to a crash
writes the same bytes again from its raft journal.

Only the loop thread uses an instance. It keeps at most ``FRESH_KEEP_RECORDS`` records
and ``FRESH_KEEP_BYTES`` bytes, the newest; a connection that is further behind reads
the file, as before.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from rt_appliance.limits import FRESH_KEEP_BYTES, FRESH_KEEP_RECORDS

__all__ = ["Fresh", "FreshRecords"]


@dataclass(frozen=True, slots=True)
class Fresh:
    """Whole merged records from ``position`` to ``end``: their bytes and how many
    publisher records they hold."""

    position: int
    end: int
    data: bytes
    records: int


class FreshRecords:
    """The newest committed merged records, by where they start."""

    def __init__(
        self, keep_records: int = FRESH_KEEP_RECORDS, keep_bytes: int = FRESH_KEEP_BYTES
    ) -> None:
        self._keep_records, self._keep_bytes = keep_records, keep_bytes
        self._by_start: dict[int, Fresh] = {}
        self._order: collections.deque[int] = collections.deque()
        self._bytes = 0
        self.added = 0  # records handed in since the start
        self.served = 0  # records a connection sent from here

    def add(self, position: int, record: bytes, records: int) -> None:
        """The merged record ``record`` starts at ``position`` and holds ``records``
        publisher records. A record kept already is not taken twice."""
        if position in self._by_start or len(record) > self._keep_bytes:
            return
        self._by_start[position] = Fresh(position, position + len(record), record, records)
        self._order.append(position)
        self._bytes += len(record)
        self.added += 1
        while len(self._order) > self._keep_records or self._bytes > self._keep_bytes:
            gone = self._by_start.pop(self._order.popleft())
            self._bytes -= len(gone.data)

    def after(self, position: int, max_bytes: int) -> Fresh | None:
        """The records kept from ``position`` on, one after the other with no gap, at most
        ``max_bytes`` (None: none starts there, or the first alone is larger)."""
        first = self._by_start.get(position)
        if first is None or len(first.data) > max_bytes:
            return None
        parts, records, end, size = [first.data], first.records, first.end, len(first.data)
        following = self._by_start.get(end)
        while following is not None and size + len(following.data) <= max_bytes:
            parts.append(following.data)
            records += following.records
            size += len(following.data)
            end = following.end
            following = self._by_start.get(end)
        self.served += len(parts)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return Fresh(position, end, data, records)
