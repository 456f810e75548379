"""Reading one slice of a stream directory as Arrow record batches (runs in Spark's tasks).

The compiled record walk (:func:`rt_appliance.log.scan.scan_columns`) checks each
record's CRC and hands over offsets, timestamps, ids and the payloads back to back,
so a batch is built from a few numpy operations per block of records, never a
Python object per row. Each row's ``position`` is the position to restart from
after it, as the Subscriber's ``next_position``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from rt_appliance.errors import LogError
from rt_appliance.limits import MAX_BATCH_MESSAGES, SPARK_BATCH_BYTES, SPARK_BATCH_ROWS
from rt_appliance.log.cursor import LogCursor
from rt_appliance.log.scan import Scan
from rt_appliance.position import Position
from rt_appliance.spark.codecs import PayloadCodec

__all__ = ["read_slice"]


@dataclass(slots=True)
class _Pending:
    """Blocks read but not yet handed out, as columns."""

    positions: list[np.ndarray] = field(default_factory=list)
    timestamps_ns: list[np.ndarray] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)
    payloads: list[pa.Array] = field(default_factory=list)
    names: list[tuple[str, str]] = field(default_factory=list)  # (topic, host) per block
    rows: int = 0
    payload_bytes: int = 0

    def add(self, topic: str, host: str, base: int, records: Scan) -> None:
        columns = records.columns
        assert columns is not None
        count = len(columns)
        # base has only session and roll bits, an offset only the low 30: + is |
        self.positions.append(np.asarray(records.ends(), dtype=np.int64) + np.int64(base))
        self.timestamps_ns.append(columns.timestamps_ns)
        self.ids.append(columns.ids)
        self.payloads.append(
            pa.Array.from_buffers(
                pa.binary(),
                count,
                [None, pa.py_buffer(columns.value_offsets), pa.py_buffer(columns.data)],
            )
        )
        self.names.append((topic, host))
        self.rows += count
        self.payload_bytes += int(columns.value_offsets[-1])


def read_slice(
    directory: Path,
    start: int,
    end: int,
    topics: frozenset[str] | None,
    codec: PayloadCodec,
) -> Iterator[pa.RecordBatch]:
    """The records from position ``start`` up to ``end`` (a record boundary), in batches."""
    pending = _Pending()
    with LogCursor(directory, Position(start)) as cursor:
        position = Position(start)
        while position < end:
            block = cursor.next_block(MAX_BATCH_MESSAGES, columns=True)
            if block is None:
                raise LogError(
                    f"{directory}: records between {Position(position).format()} and "
                    f"{Position(end).format()} are no longer there (pruned or truncated "
                    "after the query was planned)"
                )
            base, records = cursor.file_base, block.records
            columns = records.columns
            assert columns is not None
            keep = int(np.searchsorted(columns.offsets, Position(end).offset, "left"))
            if Position(end).file_key != Position(base).file_key:
                keep = len(columns)
            if keep < len(columns):
                records.head(keep)
            position = Position(base | records.stop_offset)
            if topics is None or block.topic in topics:
                pending.add(block.topic, block.host, base, records)
            if pending.rows >= SPARK_BATCH_ROWS or pending.payload_bytes >= SPARK_BATCH_BYTES:
                yield from codec.batches(_flush(pending))
                pending = _Pending()
    if pending.rows:
        yield from codec.batches(_flush(pending))


def _flush(pending: _Pending) -> dict[str, pa.Array]:
    """The pending blocks as the base columns plus ``payload``."""
    counts = [len(ids) for ids in pending.ids]
    names = sorted(set(pending.names))
    index = {name: i for i, name in enumerate(names)}
    which = np.repeat(np.array([index[n] for n in pending.names], dtype=np.int32), counts)
    topics = pa.array([t for t, _ in names], pa.string())
    hosts = pa.array([h for _, h in names], pa.string())
    stamps_us = np.concatenate(pending.timestamps_ns) // 1000
    return {
        "position": pa.array(np.concatenate(pending.positions), pa.int64()),
        "topic": pa.DictionaryArray.from_arrays(which, topics).cast(pa.string()),
        "host": pa.DictionaryArray.from_arrays(which, hosts).cast(pa.string()),
        "timestamp": pa.array(stamps_us, pa.timestamp("us", tz="UTC")),
        "id": pa.array(np.concatenate(pending.ids), pa.int64()),
        "payload": pa.concat_arrays(pending.payloads)
        if len(pending.payloads) > 1
        else pending.payloads[0],
    }
