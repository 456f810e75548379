"""What a subscriber yields: messages, and batches of them for speed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rt_appliance.payloads import decode_arrow
from rt_appliance.position import Position

__all__ = ["Message", "MessageBatch"]


@dataclass(frozen=True, slots=True)
class Message:
    """One message. Resuming a read from ``next_position`` delivers the next one."""

    topic: str
    host: str
    timestamp_ns: int
    id: int
    payload: bytes
    position: Position
    next_position: Position

    def arrow(self) -> Any:
        """The pyarrow Table this message carries (sent with ``Publisher.publish_arrow``)."""
        return decode_arrow(self.payload)


@dataclass(slots=True)
class MessageBatch:
    """Consecutive messages of one source in one file, as columns.

    ``payloads``, ``timestamps_ns``, ``ids`` and ``offsets`` are parallel lists;
    resuming from ``next_position`` delivers the message after the batch.
    """

    topic: str
    host: str
    payloads: list[bytes]
    timestamps_ns: list[int]
    ids: list[int]
    offsets: list[int]  # byte offsets in the file; positions are built on demand
    file_base: int  # the position of offset 0 of the file
    next_position: Position

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def positions(self) -> list[Position]:
        base = self.file_base
        return [Position(base | o) for o in self.offsets]

    def __iter__(self) -> Iterator[Message]:
        """The batch as :class:`Message` objects (slower than the columns)."""
        base, topic, host = self.file_base, self.topic, self.host
        ends = self.offsets[1:]
        for i, offset in enumerate(self.offsets):
            nxt = Position(base | ends[i]) if i < len(ends) else self.next_position
            yield Message(
                topic,
                host,
                self.timestamps_ns[i],
                self.ids[i],
                self.payloads[i],
                Position(base | offset),
                nxt,
            )
