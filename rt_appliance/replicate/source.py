"""Reading a stream directory as whole, CRC-checked records, for sending to a peer.

A :class:`DirectorySource` hands out :class:`Chunk` objects from a position on:
byte ranges of one file, each ending on a record boundary. The first chunk of a
file starts at offset 0 and carries the file header, so the receiver's copy is
byte-identical. Every record's CRC is checked before its bytes leave the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rt_appliance.limits import MAX_BATCH_MESSAGES
from rt_appliance.log.cursor import LogCursor
from rt_appliance.log.segments import StreamFile
from rt_appliance.position import Position

__all__ = ["Chunk", "DirectorySource"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """``data`` starts at ``position``; offset 0 means it starts with a file header."""

    position: Position
    data: bytes
    next_position: Position
    records: int


class DirectorySource:
    """Chunks of at most ``max_bytes`` from ``directory``, starting at ``position``."""

    def __init__(self, directory: Path, position: Position, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._cursor = LogCursor(directory, position)
        self._header_sent_for: StreamFile | None = None
        if position.offset != 0:  # resuming inside a file the receiver already has
            self._header_sent_for = self._cursor.file

    @property
    def position(self) -> Position:
        """Where the next chunk starts (0 before the directory has any file)."""
        return self._cursor.position

    def read(self) -> Chunk | None:
        """The next chunk, or None when every valid record has been handed out."""
        before_file, before = self._cursor.file, self._cursor.position
        block = self._cursor.next_block(MAX_BATCH_MESSAGES, decode=False)
        if block is None:
            return None
        reader, current = self._cursor.reader, self._cursor.file
        assert reader is not None and current is not None
        offsets = block.records.offsets
        if self._header_sent_for != current:
            start = 0
        elif current == before_file:  # from where the last chunk ended: range records included
            start = before.offset
        else:
            start = offsets[0]
        stop = block.records.stop_offset
        if stop - start > self.max_bytes:  # keep whole records within the frame limit
            cut = next(
                (i for i, o in enumerate(offsets) if o - start > self.max_bytes), len(offsets)
            )
            keep = max(1, cut - 1)
            stop = offsets[keep] if keep < len(offsets) else stop
            reader.offset = stop  # the rest is read again next time
            count = keep
        else:
            count = len(offsets)
        self._header_sent_for = current
        base = self._cursor.file_base
        return Chunk(
            Position(base | start), reader.pread(stop - start, start), Position(base | stop), count
        )

    def close(self) -> None:
        self._cursor.close()
