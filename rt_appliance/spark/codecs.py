"""Payload codecs of the ``rt`` data source: raw bytes, JSON documents, Arrow IPC tables.

A :class:`PayloadCodec` turns the columns a slice read (``position``, ``topic``,
``host``, ``timestamp``, ``id``, ``payload``) into record batches of the query's
Arrow schema:

* ``raw`` keeps ``payload`` as binary;
* ``json`` parses every payload as one JSON object into the schema's payload
  fields, all of a batch at once with pyarrow's JSON reader; a payload that is not
  an object of that schema gives nulls in its row, never a failed query;
* ``arrow`` reads every payload as an Arrow IPC stream (:mod:`rt_appliance.payloads`):
  one message carries many rows, and each row repeats its message's base columns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from rt_appliance.limits import ARROW_JSON_BLOCK_BYTES
from rt_appliance.payloads import decode_arrow
from rt_appliance.spark.options import BASE_COLUMNS

__all__ = ["PayloadCodec"]

_NEWLINE, _SPACE, _CR = 10, 32, 13


@dataclass(frozen=True)
class PayloadCodec:
    """How one query decodes payloads; ``schema`` is the query's whole Arrow schema."""

    name: str
    schema: pa.Schema

    @property
    def payload_schema(self) -> pa.Schema:
        """The fields a payload decodes into (json, arrow)."""
        return pa.schema([f for f in self.schema if f.name not in BASE_COLUMNS])

    def batches(self, columns: dict[str, pa.Array]) -> Iterator[pa.RecordBatch]:
        if self.name == "raw":
            yield pa.RecordBatch.from_arrays(
                [columns[f.name] for f in self.schema], schema=self.schema
            )
        elif self.name == "json":
            fields = _json_columns(columns["payload"], self.payload_schema)
            arrays = [columns[n] for n in BASE_COLUMNS] + fields
            yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        else:
            yield from self._arrow(columns)

    def _arrow(self, columns: dict[str, pa.Array]) -> Iterator[pa.RecordBatch]:
        wanted = self.payload_schema
        tables, counts = [], []
        for payload in columns["payload"].to_pylist():
            table = decode_arrow(payload)
            missing = [n for n in wanted.names if n not in table.column_names]
            if missing:
                raise ValueError(f"an Arrow payload lacks the columns {missing}")
            tables.append(table.select(wanted.names).cast(wanted))
            counts.append(table.num_rows)
        rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        merged = pa.concat_tables(tables) if tables else wanted.empty_table()
        base = [pc.take(columns[n], pa.array(rows)) for n in BASE_COLUMNS]
        fields = [merged.column(n).combine_chunks() for n in wanted.names]
        yield pa.RecordBatch.from_arrays(base + fields, schema=self.schema)


def _json_columns(payloads: pa.BinaryArray, schema: pa.Schema) -> list[pa.Array]:
    """Each payload parsed as one JSON object: one array per field of ``schema``."""
    count = len(payloads)
    if count == 0:
        return [pa.array([], f.type) for f in schema]
    try:
        table = pa_json.read_json(
            pa.BufferReader(_lines(payloads)),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=ARROW_JSON_BLOCK_BYTES),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _json_rows(payloads, schema)  # a payload is not JSON: parse one at a time
    if table.num_rows != count:  # an empty payload made no row: parse one at a time
        return _json_rows(payloads, schema)
    return [table.column(f.name).combine_chunks() for f in schema]


def _lines(payloads: pa.BinaryArray) -> bytes:
    """The payloads as newline-delimited JSON: newlines inside a payload can only be
    whitespace in valid JSON, so they become spaces."""
    _, offsets_buf, data_buf = payloads.buffers()
    first = payloads.offset
    offsets = np.frombuffer(offsets_buf, np.int32)[first : first + len(payloads) + 1]
    body = np.frombuffer(data_buf, np.uint8)[offsets[0] : offsets[-1]].copy()
    body[(body == _NEWLINE) | (body == _CR)] = _SPACE
    lines = np.insert(body, (offsets[1:] - offsets[0]).astype(np.intp), _NEWLINE)
    return lines.tobytes()


def _json_rows(payloads: pa.BinaryArray, schema: pa.Schema) -> list[pa.Array]:
    """The slow path, one payload at a time: a row that does not parse is all nulls."""
    struct = pa.struct(list(schema))
    rows = []
    for payload in payloads.to_pylist():
        try:
            doc = json.loads(payload)
            rows.append(pa.array([doc if isinstance(doc, dict) else None], struct))
        except (ValueError, TypeError, pa.ArrowException):
            rows.append(pa.array([None], struct))
    column = pa.concat_arrays(rows)
    return list(column.flatten())  # flatten, unlike field(), keeps a null row null
