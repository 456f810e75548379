"""When a node compacts its raft journal: often enough that a restart replays little of it,
rarely enough that a follower that was away briefly catches up from the leader's journal
rather than from a snapshot.

A restarting node applies every journal entry after its snapshot before it serves (about
0.05 ms an entry here), so the journal's length is the node's cold start. pysyncobj's own
trigger can hold ten minutes of entries (with ``logCompactionSplit`` a node compacts
only in a slot of its own once every ``logCompactionMinTime``), so the node asks for each
compaction itself (``forceLogCompaction``) when :meth:`CompactionPolicy.due` says so:

* once the journal holds ``threshold`` entries: ``compaction_min_entries``, staggered by
  the node's place among the nodes (x1, x1.33, x1.67 of three) so that the nodes, whose
  journals grow alike, do not all snapshot at the same moment;
* or once ``compaction_min_s`` passed since the last compaction (a quiet stream);
* but a leader with a follower behind the entries it would drop waits, up to ``cap``
  entries (four times ``compaction_min_entries``): that follower is sent entries, not
  the whole snapshot, when it comes back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CAP_FACTOR", "CompactionPolicy"]

CAP_FACTOR = 4  # a leader keeps entries for a follower up to this many x min_entries


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    threshold: int  # entries that make a compaction due (this node's, staggered)
    cap: int  # entries past which it is due even with a follower behind
    min_s: float  # seconds after which it is due whatever the length

    @classmethod
    def for_node(
        cls, min_entries: int, min_s: float, node: str, nodes: Iterable[str]
    ) -> CompactionPolicy:
        """The policy of ``node`` among ``nodes`` (their order by name staggers them)."""
        names = sorted(nodes)
        place = names.index(node)
        threshold = min_entries + min_entries * place // len(names)
        return cls(threshold, CAP_FACTOR * min_entries, float(min_s))

    def due(self, entries: int, since_last_s: float, follower_behind: bool) -> bool:
        """Whether to compact a journal of ``entries`` entries now, ``since_last_s`` after
        the last compaction (or the start); ``follower_behind``: this node leads and a
        follower has not yet received entries the compaction would drop."""
        if entries <= 2:  # pysyncobj keeps the last two: nothing to drop
            return False
        if entries >= self.cap:
            return True
        if follower_behind:
            return False
        return entries >= self.threshold or since_last_s >= self.min_s
