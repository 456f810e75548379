"""The state machine raft drives: the committed state plus the work it left for the merger.

``apply`` runs in raft's thread for every committed command, in order, on every
node. It updates :class:`SequencerState` and queues what the merger must do
(write a merged record, prune files). Snapshots hold the state and the queued
work the merger has not done yet, so compacting raft's log never loses an
instruction this node still has to write.
"""

from __future__ import annotations

import base64
import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rt_appliance import trace
from rt_appliance.limits import PROPOSED_KEPT
from rt_appliance.sequencer.state import (
    Instruction,
    Lease,
    Merge,
    SequencerState,
    decode_instruction,
)

__all__ = ["Committed", "SequencerMachine"]


@dataclass(frozen=True, slots=True)
class Committed:
    """One applied instruction, with what the merger needs to carry it out."""

    instruction: Instruction
    command: bytes
    watermark_before: int | None  # dedup topics: the watermark the merge filters against
    digest_after: str  # the state's digest once this merge is applied
    # a merge that carries its input: its merged record, built as it was applied and
    # checked against the commit (None: the merger builds it)
    record: bytes | None = None
    sent: bool = False  # that record was handed to the pull server as it was applied


class SequencerMachine:
    """Committed state, guarded by a lock; the merger consumes :attr:`pending`."""

    def __init__(self, stream: str, roll_bytes: int) -> None:
        self.cond = threading.Condition()
        self.state = SequencerState(stream, roll_bytes)
        self.pending: collections.deque[Committed] = collections.deque()
        # carried out by the merger, not yet synced by it: still owed after a power loss
        self.unsynced: collections.deque[Committed] = collections.deque()
        self.restored: tuple[int, str] | None = None  # (seq, digest) of a restored snapshot
        self.listeners: list[Callable[[], None]] = []
        # builds the merged record of a merge carrying its input, as it is applied (None
        # if it does not match the commit): the merger and the pull server take it
        self.prebuild: Callable[[Merge, int | None], bytes | None] | None = None
        # told each record so built (where it starts, its bytes, publisher records), on
        # the thread that applies; True if it took it (its connections were woken)
        self.on_record: Callable[[int, bytes, int], bool] | None = None
        self.last_carried = False  # whether the last merge applied carried its input
        # this node's own proposals, by their bytes: applied without decoding them again
        self._proposed: dict[bytes, Instruction] = {}

    def proposing(self, command: bytes, instruction: Instruction) -> None:
        """``command`` is ``instruction.encode()``, proposed by this node: when it is
        committed, :meth:`apply` takes ``instruction`` instead of decoding the bytes (an
        encoded instruction decodes to an equal one). Proposals that never commit leave
        at most ``PROPOSED_KEPT`` here, the oldest dropped first."""
        with self.cond:
            self._proposed[command] = instruction
            if len(self._proposed) > PROPOSED_KEPT:
                del self._proposed[next(iter(self._proposed))]

    def apply(self, command: bytes) -> bool:
        with self.cond:
            own = self._proposed.pop(command, None)
            ins = decode_instruction(command) if own is None else own
            before = self.state.watermark_of(ins.dir) if isinstance(ins, Merge) else None
            applied = self.state.apply_decoded(ins)
            if applied is None:
                return False
            if isinstance(applied, Lease):  # nothing for the merger to do: the state is all
                self.cond.notify_all()
                return True
            record, sent = None, False
            if isinstance(applied, Merge) and applied.data is not None and self.prebuild:
                record = self.prebuild(applied, before)
                if record is not None and self.on_record is not None:
                    sent = self.on_record(applied.position, record, applied.count)
            self.pending.append(
                Committed(applied, command, before, self.state.digest, record, sent)
            )
            if isinstance(applied, Merge):
                self.last_carried = applied.data is not None
                trace.event("applied", applied.dir, applied.end, applied.seq)
            self.cond.notify_all()
        for listener in self.listeners:
            listener()
        return True

    def committed(self) -> SequencerState:
        with self.cond:
            return self.state.copy()

    def snapshot(self) -> dict[str, Any]:
        """The state and the work still owed: instructions not carried out, and those
        carried out but not yet synced to the merged log (carrying one out again after a
        restart finds it done). Nothing here waits for a sync: raft's loop takes it."""
        with self.cond:
            return {
                "state": self.state.to_json(),
                "pending": [
                    [base64.b64encode(c.command).decode(), c.watermark_before, c.digest_after]
                    for c in (*self.unsynced, *self.pending)
                ],
            }

    def done(self, item: Committed) -> None:
        """The merger carried out ``item`` (the head of :attr:`pending`); owed until synced."""
        with self.cond:
            if self.pending and self.pending[0] is item:
                self.pending.popleft()
                self.unsynced.append(item)

    def synced(self, count: int) -> None:
        """The merger synced what it carried out before its sync began (``count`` items)."""
        with self.cond:
            for _ in range(min(count, len(self.unsynced))):
                self.unsynced.popleft()

    def restore(self, snapshot: dict[str, Any]) -> None:
        with self.cond:
            roll_bytes = self.state.roll_bytes  # the configuration's, the same on every node
            self.state = SequencerState.from_json(snapshot["state"])
            self.state.roll_bytes = roll_bytes
            self.pending.clear()
            self.unsynced.clear()
            for command_b64, before, digest in snapshot.get("pending", []):
                command = base64.b64decode(command_b64)
                ins = decode_instruction(command)
                if not isinstance(ins, str):
                    self.pending.append(Committed(ins, command, before, digest))
            self.restored = (self.state.seq, self.state.digest)
            self.cond.notify_all()
