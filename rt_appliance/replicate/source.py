"""Reading a stream directory as whole, CRC-checked records, for sending to a peer.

A :class:`DirectorySource` hands out :class:`Chunk` objects from a position on:
byte ranges of one file, each ending on a record boundary. The first chunk of a
file starts at offset 0 and carries the file header, so the receiver's copy is
byte-identical. Every record's CRC is checked before its bytes leave the host.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.limits import MAX_BATCH_MESSAGES
from rt_appliance.log.cursor import LogCursor
from rt_appliance.log.scan import Stop, scan
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
    """Chunks of at most ``max_bytes`` from ``directory``, starting at ``position``.

    Sources reading the same directory (a push client's one per node) may share
    ``verified``: file key -> offset up to which every record's CRC was checked.
    Then each byte is checked once, by whichever source reads it first, and the
    others only walk record boundaries. A check that fails makes the source read
    that block again the ordinary way, which tells a torn tail from corruption.
    """

    def __init__(
        self,
        directory: Path,
        position: Position,
        max_bytes: int,
        verified: dict[tuple[int, int], int] | None = None,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._verified = verified
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
        shared = self._verified is not None
        block = self._cursor.next_block(MAX_BATCH_MESSAGES, decode=False, verify=not shared)
        if block is None:
            return None
        chunk = self._chunk(block.records.offsets, block.records.stop_offset, before_file, before)
        if shared and not self._check(chunk, block.records.offsets[0]):
            reader = self._cursor.reader
            assert reader is not None
            reader.offset = block.records.offsets[0]  # read it again, checking as it goes
            block = self._cursor.next_block(MAX_BATCH_MESSAGES, decode=False, verify=True)
            if block is None:
                return None
            chunk = self._chunk(
                block.records.offsets, block.records.stop_offset, before_file, before
            )
        self._header_sent_for = self._cursor.file
        return chunk

    def _chunk(
        self, offsets: list[int], stop: int, before_file: StreamFile | None, before: Position
    ) -> Chunk:
        reader, current = self._cursor.reader, self._cursor.file
        assert reader is not None and current is not None
        if self._header_sent_for != current:
            start = 0
        elif current == before_file:  # from where the last chunk ended: range records included
            start = before.offset
        else:
            start = offsets[0]
        count = len(offsets)
        if stop - start > self.max_bytes:  # keep whole records within the frame limit
            cut = bisect.bisect_right(offsets, start + self.max_bytes)  # first record past it
            count = max(1, cut - 1)
            stop = offsets[count] if count < len(offsets) else stop
            reader.offset = stop  # the rest is read again next time
        base = self._cursor.file_base
        data = reader.read_at(stop - start, start)
        return Chunk(Position(base | start), data, Position(base | stop), count)

    def _check(self, chunk: Chunk, first_record: int) -> bool:
        """Check the CRCs of the chunk's records nobody has checked yet."""
        assert self._verified is not None
        key, start = chunk.position.file_key, chunk.position.offset
        done = max(self._verified.get(key, 0), first_record)
        stop = chunk.next_position.offset
        if done >= stop:
            return True
        result = scan(chunk.data, done - start, len(chunk.data), decode=False)
        if result.stop is not Stop.NEED_MORE or result.stop_offset != len(chunk.data):
            return False
        self._verified[key] = stop
        return True

    def close(self) -> None:
        self._cursor.close()
