"""Reading a stream directory as whole, CRC-checked records, for sending to a peer.

A :class:`DirectorySource` hands out :class:`Chunk` objects from a position on:
byte ranges of one file, each ending on a record boundary. The first chunk of a
file starts at offset 0 and carries the file header, so the receiver's copy is
byte-identical. Every record's CRC is checked before its bytes leave the host.

A record larger than a chunk may be (``max_bytes``, the frame limit less its
header) goes out in pieces: its CRC is checked reading the file a few MiB at a
time, then consecutive chunks carry ``max_bytes`` of it each, the last one ending
where the record ends. Only that last chunk ends on a record boundary; the
receiver (:class:`~rt_appliance.replicate.sink.ReplicaDir`) takes the record as
its own once every piece is there. So memory on both sides stays within a few
frames whatever the record size, and every record the Publisher accepts travels.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import LogError
from rt_appliance.limits import MAX_BATCH_MESSAGES
from rt_appliance.log.cursor import LogCursor
from rt_appliance.log.format import RECORD_HEADER
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


@dataclass(slots=True)
class _Pieces:
    """A record going out in pieces: the next piece starts at ``at``; it ends at ``end``."""

    base: int  # the position of offset 0 of its file
    at: int
    end: int


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
        self._cursor = LogCursor(directory, position, max_record_bytes=max_bytes)
        self._header_sent_for: StreamFile | None = None
        self._large: _Pieces | None = None  # a record being sent in pieces
        if position.offset != 0:  # resuming inside a file the receiver already has
            self._header_sent_for = self._cursor.file

    @property
    def position(self) -> Position:
        """Where the next chunk starts (0 before the directory has any file)."""
        return self._cursor.position

    def read(self) -> Chunk | None:
        """The next chunk, or None when every valid record has been handed out."""
        if self._large is not None:
            return self._next_piece(self._large)
        before_file, before = self._cursor.file, self._cursor.position
        shared = self._verified is not None
        block = self._cursor.next_block(MAX_BATCH_MESSAGES, decode=False, verify=not shared)
        if block is None:
            if self._cursor.at_large_record:
                reader = self._cursor.reader
                assert reader is not None and reader.tail is not None
                return self._start_pieces(reader.tail.offset, before_file, before)
            return None
        offsets = block.records.offsets
        first_end = offsets[1] if len(offsets) > 1 else block.records.stop_offset
        if first_end - self._start_offset(offsets[0], before_file, before) > self.max_bytes:
            return self._start_pieces(offsets[0], before_file, before)  # alone it is too large
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

    def skip(self, position: Position, end: Position) -> bool:
        """Go on at ``end``: the caller sent the whole merged records from ``position``
        (where this source stands, in a file whose header went out) to ``end`` itself."""
        if self._large is not None or self._header_sent_for != self._cursor.file:
            return False
        return self._cursor.skip(position, end)

    def _start_offset(self, first: int, before_file: StreamFile | None, before: Position) -> int:
        """Where the next chunk starts in the current file; ``first``: its first record."""
        current = self._cursor.file
        if self._header_sent_for != current:
            return 0
        if current == before_file:  # from where the last chunk ended: range records included
            return before.offset
        return first

    def _start_pieces(
        self, record: int, before_file: StreamFile | None, before: Position
    ) -> Chunk | None:
        """The first piece of the record at ``record``, too large for one chunk (its CRC is
        checked first, reading the file a few MiB at a time)."""
        reader, current = self._cursor.reader, self._cursor.file
        assert reader is not None and current is not None
        end = (
            record
            + RECORD_HEADER.size
            + RECORD_HEADER.unpack(reader.pread(RECORD_HEADER.size, record))[1]
        )
        key = (current.session, current.roll)
        if self._verified is None or self._verified.get(key, 0) < end:
            if reader.check_large(record)[1]:  # a bad record with nothing valid after it
                return None
            if self._verified is not None:
                self._verified[key] = end
        start = self._start_offset(record, before_file, before)
        self._large = _Pieces(self._cursor.file_base, start, end)
        return self._next_piece(self._large)

    def _next_piece(self, pieces: _Pieces) -> Chunk:
        reader = self._cursor.reader
        assert reader is not None
        start = pieces.at
        stop = min(start + self.max_bytes, pieces.end)
        data = reader.pread(stop - start, start)
        if len(data) != stop - start:
            raise LogError(f"{reader.path}: file shrank while sending the record at {start}")
        pieces.at = stop
        if stop == pieces.end:  # the record is out: read on after it
            self._large = None
            reader.offset = stop
            reader.tail = None
            self._header_sent_for = self._cursor.file
        base = pieces.base
        return Chunk(Position(base | start), data, Position(base | stop), int(stop == pieces.end))

    def _chunk(
        self, offsets: list[int], stop: int, before_file: StreamFile | None, before: Position
    ) -> Chunk:
        reader, current = self._cursor.reader, self._cursor.file
        assert reader is not None and current is not None
        start = self._start_offset(offsets[0], before_file, before)
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

    def __enter__(self) -> DirectorySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
