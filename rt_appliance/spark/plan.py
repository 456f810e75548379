"""Planning a read of a stream directory: where it starts and ends, and its partitions.

Runs on the Spark driver (no pyspark here). :func:`plan` walks the records between
two positions, checking every CRC, so a corrupt record fails the query before any
task starts, and cuts the range into :class:`Slice`\\ s: one per file, or byte
ranges of a file, always at record boundaries. A read limit (records, bytes)
ends the walk early; the end it reports is then the boundary after the last
record it took.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.errors import PositionPrunedError
from rt_appliance.limits import DEFAULT_SPLIT_BYTES, MAX_BATCH_MESSAGES
from rt_appliance.log.cursor import LogCursor
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position

__all__ = ["Plan", "Slice", "earliest", "plan"]


@dataclass(frozen=True, slots=True)
class Slice:
    """Records of one file from ``start`` up to (not including) ``end``: one partition."""

    start: int  # a position (a record boundary, or the start of the file)
    end: int  # a position in the same file: a record boundary
    records: int


@dataclass(slots=True)
class Plan:
    start: Position
    end: Position
    records: int = 0
    bytes: int = 0
    slices: list[Slice] = field(default_factory=list)


def earliest(directory: Path) -> Position:
    """Where the oldest file still present starts (0 when there is none yet)."""
    files = list_files(directory)
    return Position.of(files[0].session, files[0].roll, 0) if files else Position.ZERO


def plan(
    directory: Path,
    start: Position,
    end: Position | None = None,
    max_records: int | None = None,
    max_bytes: int | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
) -> Plan:
    """The records from ``start`` to ``end`` (None: all there are now), within the limits.

    Raises :class:`PositionPrunedError` when ``start`` lies in a file that was pruned,
    :class:`CorruptLogError` at a damaged record.
    """
    result = Plan(start, start)
    with LogCursor(directory, start) as cursor:
        current: _Open | None = None
        while True:
            room = _room(result, max_records, max_bytes)
            if room == 0:
                break
            block = cursor.next_block(min(room, MAX_BATCH_MESSAGES), decode=False)
            if block is None:
                break
            base, records = cursor.file_base, block.records
            offsets = records.offsets
            at = Position(base | offsets[0])
            if current is None or current.base != base:
                if current is not None:
                    result.slices.append(current.close())
                current = _Open(base, at, split_bytes)
            stop = Position(base | records.stop_offset)
            cut = _cut(offsets, records.stop_offset, base, end, max_bytes, result.bytes, at)
            if cut < len(offsets):
                stop = Position(base | offsets[cut])
            current.extend(cut, at, stop, result)
            result.records += cut
            result.bytes += stop - at
            result.end = stop
            if cut < len(offsets) or (end is not None and stop >= end):
                break
        if current is not None:
            result.slices.append(current.close())
    result.slices = [s for s in result.slices if s.records]
    if end is not None and result.end < end and not result.slices and result.records == 0:
        _check_reachable(directory, start, end)
    return result


def _room(result: Plan, max_records: int | None, max_bytes: int | None) -> int:
    """How many more records may be taken (a large number when only bytes bound it)."""
    if max_bytes is not None and result.bytes >= max_bytes and result.records:
        return 0
    if max_records is None:
        return MAX_BATCH_MESSAGES
    return max(0, max_records - result.records)


def _cut(
    offsets: list[int],
    stop_offset: int,
    base: int,
    end: Position | None,
    max_bytes: int | None,
    taken_bytes: int,
    at: Position,
) -> int:
    """How many records of a block to take: those before ``end`` and within ``max_bytes``
    (always at least one, so a record larger than the byte limit still goes through)."""
    cut = len(offsets)
    if end is not None:
        here = Position(base)
        if end.file_key == here.file_key:
            cut = bisect.bisect_left(offsets, end.offset)
        elif end.file_key < here.file_key:
            cut = 0
    if max_bytes is not None and cut:
        ends = [*offsets[1:], stop_offset]
        allowed = max_bytes - taken_bytes
        fits = bisect.bisect_right(ends, offsets[0] + allowed, 0, cut)
        cut = max(fits, 1 if taken_bytes == 0 else 0)
    return cut


@dataclass(slots=True)
class _Open:
    """The slice being built in one file; a new one starts every ``split_bytes``, at the
    start of a block (a record boundary)."""

    base: int
    start: Position
    split_bytes: int
    records: int = 0
    end: Position = Position.ZERO

    def extend(self, count: int, at: Position, stop: Position, result: Plan) -> None:
        if not count:
            return
        if self.records and at - self.start >= self.split_bytes:
            result.slices.append(Slice(self.start, at, self.records))
            self.start, self.records = at, 0
        self.records += count
        self.end = stop

    def close(self) -> Slice:
        return Slice(self.start, self.end, self.records)


def _check_reachable(directory: Path, start: Position, end: Position) -> None:
    """An ending position beyond the data: fine (the data ends first), unless it was pruned."""
    files = list_files(directory)
    if files and Position.of(files[0].session, files[0].roll, 0) > end:
        raise PositionPrunedError(f"{directory}: position {end.format()} was pruned")
