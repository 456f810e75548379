"""The ``rt`` data source: stream directories for ``spark.read`` and ``spark.readStream``.

PySpark's Python Data Source API (4.2+) drives these classes: the driver calls
``schema``, ``partitions`` and, for a stream, ``initialOffset``/``latestOffset``/
``commit``; Spark's tasks call ``read`` with one :class:`RtPartition` each.
Planning (:mod:`rt_appliance.spark.plan`) walks the records and checks every CRC on
the driver, so a bad option, a missing directory, a pruned starting position or a
corrupt record fails the query with one clear error before any task starts.

Streaming offsets are positions, as JSON with a fixed layout, e.g.
``{"position": 17592188141568, "file": "log.1.0", "offset": 4096}``; only
``position`` is read back, the rest is for people reading checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from rt_appliance.errors import LogError, PositionPrunedError, UsageError
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.sequencer.holds import write_hold
from rt_appliance.spark.codecs import PayloadCodec
from rt_appliance.spark.options import (
    BASE_COLUMNS,
    BASE_DDL,
    RAW_DDL,
    SourceOptions,
    parse_options,
)
from rt_appliance.spark.plan import Slice, earliest, plan
from rt_appliance.spark.read import read_slice

__all__ = ["RtDataSource", "RtPartition"]


class RtPartition(InputPartition):
    """One slice of one file: what a task reads."""

    directory: str
    start: int
    end: int

    def __init__(self, directory: str, start: int, end: int) -> None:
        super().__init__((directory, start, end))
        self.directory, self.start, self.end = directory, start, end


class RtDataSource(DataSource):
    """``format("rt")``: rows of ``position, topic, host, timestamp, id`` and the payload."""

    @classmethod
    def name(cls) -> str:
        return "rt"

    def schema(self) -> StructType | str:
        options = parse_options(self.options)
        if options.codec == "raw":
            return RAW_DDL
        if options.schema_ddl is not None:
            return f"{BASE_DDL}, {options.schema_ddl}"
        return _inferred_arrow_schema(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RtBatchReader(parse_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RtStreamReader(parse_options(self.options), schema)


def _codec(options: SourceOptions, schema: StructType) -> PayloadCodec:
    clash = [n for n in schema.fieldNames()[len(BASE_COLUMNS) :] if n in BASE_COLUMNS]
    if clash:
        raise UsageError(f"rt data source: option schema names a base column: {clash[0]!r}")
    return PayloadCodec(options.codec, to_arrow_schema(schema, timezone="UTC"))


def _read(options: SourceOptions, codec: PayloadCodec, partition: Any) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RtPartition):  # Spark's stand-in for "no partitions"
        return iter(())
    return read_slice(options.directory, partition.start, partition.end, options.topics, codec)


def _partitions(options: SourceOptions, slices: Sequence[Slice]) -> list[RtPartition]:
    directory = str(options.directory.absolute())
    return [RtPartition(directory, s.start, s.end) for s in slices]


class RtBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options, self.codec = options, _codec(options, schema)

    def partitions(self) -> list[RtPartition]:
        o = self.options
        if o.starting == "latest":
            return []
        start = earliest(o.directory) if o.starting == "earliest" else o.starting
        end = None if o.ending == "latest" else o.ending
        assert not isinstance(start, str) and not isinstance(end, str)
        return _partitions(o, plan(o.directory, start, end, split_bytes=o.split_bytes).slices)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.codec, partition)


class RtStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream over a growing directory, with positions as offsets."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options, self.codec = options, _codec(options, schema)
        self._cap: Position | None = None  # Trigger.AvailableNow: read up to here
        self._planned: tuple[Position, Position, list[Slice]] | None = None

    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        if o.starting == "earliest":
            start = earliest(o.directory)
        elif o.starting == "latest":
            start = _data_end(o)
        else:
            assert isinstance(o.starting, Position)
            start = o.starting
            plan(o.directory, start, start)  # a clear error now if it was pruned
        self._hold(start)
        return _offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records is not None:
            return ReadMaxRows(self.options.max_records)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = _data_end(self.options)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        o, begin = self.options, _position(start)
        rows = o.max_records
        if isinstance(limit, ReadMaxRows):
            rows = min(rows or limit.max_rows, limit.max_rows)
        size = o.max_bytes
        if isinstance(limit, ReadMaxBytes):
            size = min(size or limit.max_bytes, limit.max_bytes)
        try:
            found = plan(o.directory, begin, self._cap, rows, size, o.split_bytes)
        except PositionPrunedError as exc:
            raise PositionPrunedError(_gap_message(o, begin, str(exc))) from None
        self._planned = (begin, found.end, found.slices)
        return _offset(found.end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RtPartition]:
        begin, stop = _position(start), _position(end)
        if begin >= stop:
            return []
        if self._planned is not None and self._planned[:2] == (begin, stop):
            slices = self._planned[2]
        else:  # a batch logged before a restart: plan the same range again
            o = self.options
            found = plan(o.directory, begin, stop, split_bytes=o.split_bytes)
            if found.end < stop:  # logged where the log was longer (another node's copy)
                raise LogError(
                    f"{o.directory} ends at {found.end.format()}, before {stop.format()} "
                    "where the logged batch ends: this copy of the log is behind; "
                    "run again once it has caught up"
                )
            slices = found.slices
        return _partitions(self.options, slices)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.codec, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._hold(_position(end))

    def _hold(self, position: Position) -> None:
        if self.options.hold_file is not None:
            write_hold(self.options.hold_file, position)


def _offset(position: Position) -> dict[str, Any]:
    """A streaming offset: the same position always gives the same JSON text."""
    return {
        "position": int(position),
        "file": f"log.{position.session}.{position.roll}",
        "offset": position.offset,
    }


def _position(offset: dict[str, Any]) -> Position:
    return Position.parse(offset["position"])


def _data_end(options: SourceOptions) -> Position:
    """Where the valid data of the newest file ends now."""
    files = list_files(options.directory)
    if not files:
        return Position.ZERO
    last = files[-1]
    return plan(options.directory, Position.of(last.session, last.roll, 0)).end


def _gap_message(options: SourceOptions, committed: Position, cause: str) -> str:
    files = list_files(options.directory)
    oldest = f"log.{files[0].session}.{files[0].roll}" if files else "none"
    return (
        f"{options.directory}: this query has read up to position {committed.format()} "
        f"(log.{committed.session}.{committed.roll}, offset {committed.offset}), but the files "
        f"from there up to {oldest} were pruned before it read them: the records between are "
        f"gone for this query ({cause}). The archiver's disk limit overrides holds; give the "
        "node more disk, then start the query again from a new checkpoint."
    )


def _inferred_arrow_schema(options: SourceOptions) -> StructType:
    """codec arrow without schema: the columns of the first Arrow payload of the directory."""
    from rt_appliance.subscribe import Subscriber

    found = None
    topics = options.topics
    for message in Subscriber(options.directory).read(0, topics=topics):
        found = message.arrow().schema
        break
    if found is None:
        raise UsageError(
            f"rt data source: codec arrow needs option schema: {options.directory} "
            "holds no message to take the columns from yet"
        )
    base = StructType.fromJson(_BASE_JSON)
    for field in from_arrow_schema(found, prefer_timestamp_ntz=False).fields:
        base.add(field)
    return base


_BASE_JSON = {
    "type": "struct",
    "fields": [
        {"name": "position", "type": "long", "nullable": False, "metadata": {}},
        {"name": "topic", "type": "string", "nullable": False, "metadata": {}},
        {"name": "host", "type": "string", "nullable": False, "metadata": {}},
        {"name": "timestamp", "type": "timestamp", "nullable": False, "metadata": {}},
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    ],
}
