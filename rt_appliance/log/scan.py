"""Scanning records out of a buffer: the hot loop of every reader.

:func:`scan` is pure: bytes in, a :class:`Scan` out. It stops at the end of the
buffer, at a limit of records, at a range record (merged log) or at the first
record that fails a check; deciding whether a failure is a torn tail or
corruption needs the rest of the file, which is :mod:`rt_appliance.log.reader`'s job.
"""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass, field
from enum import Enum
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported when first used: a node process rarely needs it
    import numpy as np

from rt_appliance.limits import MAX_PAYLOAD_BYTES, NUMPY_MIN_RECORDS, UNBOUNDED_SCAN_RECORDS
from rt_appliance.log.format import KIND_MESSAGE, KIND_RANGE, RECORD_HEADER

_native: ModuleType | None
try:
    import rt_appliance.log._walk as _native
except ImportError:  # built without a C compiler: the Python walk below
    _native = None

__all__ = ["Columns", "Scan", "Stop", "check_record", "check_records", "scan", "scan_columns"]

_HEADER_BYTES = RECORD_HEADER.size
_LENGTH = struct.Struct("<4xI")  # just the length field of a record header
_SCAN_HEADER = struct.Struct("<IIIqq")  # the same header, for the few-records path


@functools.cache
def _header_dtype() -> np.dtype:
    """The record header as a numpy record, with kind, flags and reserved read as one
    u32 (zero for a message record): pass 2 gathers every header of a buffer at once."""
    import numpy as np

    return np.dtype(
        [
            ("crc", "<u4"),
            ("length", "<u4"),
            ("kind_flags", "<u4"),
            ("timestamp_ns", "<i8"),
            ("id", "<i8"),
        ]
    )


def _gather_headers(buf: bytes, offsets: list[int]) -> np.ndarray:
    """The record headers at ``offsets`` of ``buf``, as one structured array."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    if not offsets:
        return np.zeros(0, dtype=_header_dtype())
    windows = sliding_window_view(np.frombuffer(buf, dtype=np.uint8), _HEADER_BYTES)
    rows = windows[np.array(offsets, dtype=np.intp)]  # a copy: (len(offsets), 28) bytes
    return rows.view(_header_dtype()).ravel()


def _check_headers(
    buf: bytes, offsets: list[int], ends: list[int]
) -> tuple[int | None, list[int], list[int]]:
    """Check every record's CRC and fixed fields: the index of the first bad one (or None),
    and the records' timestamps and ids.

    Many records: numpy gathers the headers in one call. A few (a follower's usual
    read): a plain loop, which avoids numpy's fixed cost per call.
    """
    crc = zlib.crc32
    crcs = [crc(buf[o + 4 : e]) for o, e in zip(offsets, ends, strict=True)]
    if len(offsets) < NUMPY_MIN_RECORDS:
        rows = [_SCAN_HEADER.unpack_from(buf, o) for o in offsets]
        bad = [r[0] != c or r[2] != 0 for r, c in zip(rows, crcs, strict=True)]
        cut = bad.index(True) if True in bad else None
        return cut, [r[3] for r in rows], [r[4] for r in rows]
    import numpy as np

    heads = _gather_headers(buf, offsets)
    flags = (heads["crc"] != np.array(crcs, dtype=np.uint32)) | (heads["kind_flags"] != 0)
    cut = int(flags.argmax()) if flags.any() else None
    return cut, heads["timestamp_ns"].tolist(), heads["id"].tolist()


class Stop(Enum):
    """Why a scan stopped."""

    NEED_MORE = "need_more"  # the next record is not wholly in the buffer (or the buffer ended)
    LIMIT = "limit"  # the record limit was reached
    RANGE = "range"  # the next record is a valid range record
    BAD = "bad"  # the next record fails its CRC or has impossible fields


@dataclass(slots=True)
class Columns:
    """Records as packed columns, for columnar readers (the Spark source).

    ``offsets``, ``timestamps_ns`` and ``ids`` are int64 arrays, one value per
    record; ``data`` holds the payloads back to back and ``value_offsets`` (int32,
    one more than the records) where each starts: Arrow's binary layout.
    """

    offsets: np.ndarray
    timestamps_ns: np.ndarray
    ids: np.ndarray
    value_offsets: np.ndarray
    data: bytes

    def __len__(self) -> int:
        return len(self.offsets)

    def head(self, count: int) -> Columns:
        """The first ``count`` records."""
        return Columns(
            self.offsets[:count],
            self.timestamps_ns[:count],
            self.ids[:count],
            self.value_offsets[: count + 1],
            self.data,  # value_offsets say where the kept payloads end
        )


@dataclass(slots=True)
class Scan:
    """Records found back to back from ``start``; ``stop_offset`` is where scanning stopped.

    Either as lists (``offsets`` ...) or, from :func:`scan_columns`, as ``columns``.
    """

    start: int
    offsets: list[int] = field(default_factory=list)
    timestamps_ns: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    stop: Stop = Stop.NEED_MORE
    stop_offset: int = 0
    reason: str = ""
    columns: Columns | None = None

    @property
    def count(self) -> int:
        return len(self.offsets) if self.columns is None else len(self.columns)

    def rebase(self, base: int) -> None:
        """Make offsets relative to ``base`` bytes earlier (buffer -> file offsets)."""
        if base:
            if self.columns is None:
                self.offsets = [base + o for o in self.offsets]
            else:
                self.columns.offsets = self.columns.offsets + base
            self.start += base
            self.stop_offset += base

    def ends(self) -> list[int] | np.ndarray:
        """Where each record ends (the next one's offset, the last one's ``stop_offset``)."""
        if self.columns is None:
            return [*self.offsets[1:], self.stop_offset]
        import numpy as np

        return np.append(self.columns.offsets[1:], np.int64(self.stop_offset))

    def head(self, count: int) -> None:
        """Keep only the first ``count`` records."""
        ends = self.ends()
        self.stop_offset = int(ends[count - 1]) if count else self.start
        if self.columns is None:
            del self.offsets[count:]
            self.timestamps_ns, self.ids = self.timestamps_ns[:count], self.ids[:count]
            self.payloads = self.payloads[:count]
        else:
            self.columns = self.columns.head(count)
        self.stop = Stop.LIMIT


def check_record(buf: bytes, offset: int) -> tuple[int, int, str]:
    """Check the one record at ``offset``: ``(kind, end, problem)``.

    ``problem`` is "" for a valid record, "incomplete" when it runs past the
    buffer, or a description of what is wrong.
    """
    if offset + _HEADER_BYTES > len(buf):
        return -1, len(buf), "incomplete"
    crc, length, kind, flags, reserved, _, _ = RECORD_HEADER.unpack_from(buf, offset)
    if length > MAX_PAYLOAD_BYTES:
        return kind, offset, f"length {length} exceeds {MAX_PAYLOAD_BYTES}"
    end = offset + _HEADER_BYTES + length
    if end > len(buf):
        return kind, end, "incomplete"
    if zlib.crc32(buf[offset + 4 : end]) != crc:
        return kind, end, "CRC mismatch"
    if kind not in (KIND_MESSAGE, KIND_RANGE) or flags or reserved:
        return kind, end, f"unknown kind {kind} or flags {flags}/{reserved}"
    return kind, end, ""


def scan(
    buf: bytes,
    start: int,
    limit: int,
    decode: bool = True,
    verify: bool = True,
    payloads: bool = True,
) -> Scan:
    """Scan up to ``limit`` message records of ``buf`` from ``start``.

    With ``verify`` False only record boundaries are walked (the caller checks
    CRCs itself); with ``decode`` False only offsets are collected (verification,
    recovery); with ``payloads`` False, timestamps and ids but no payload copies.
    The walk is compiled (:mod:`rt_appliance.log._walk`) when the package was built
    with it, and :func:`_walk_python` otherwise; both give the same results.
    """
    walk = _walk_python if _native is None else _native.walk
    offsets, timestamps_ns, ids, end, failed = walk(
        buf, start, limit, verify, decode, MAX_PAYLOAD_BYTES
    )
    result = Scan(start, offsets, stop_offset=end)
    _classify_stop(result, buf, failed or len(offsets) < limit)
    if decode and verify and timestamps_ns is not None and ids is not None:
        result.timestamps_ns, result.ids = timestamps_ns, ids
        if payloads:
            ends = [*offsets[1:], end] if offsets else []
            result.payloads = [
                buf[o + _HEADER_BYTES : e] for o, e in zip(offsets, ends, strict=True)
            ]
    return result


def check_records(buf: bytes | memoryview, start: int) -> tuple[int, bool]:
    """Check the whole message records of ``buf`` from ``start`` on, without collecting
    anything: ``(end, failed)``, where ``end`` is where the last good record ends and
    ``failed`` says a record there fails its CRC or fixed fields (else the buffer ended,
    or a record there runs past it). The compiled walk when built with it."""
    if _native is None:
        _, _, _, end, failed = _walk_python(
            bytes(buf), start, UNBOUNDED_SCAN_RECORDS, True, False, MAX_PAYLOAD_BYTES
        )
    else:
        _, _, _, end, failed = _native.walk(
            buf, start, UNBOUNDED_SCAN_RECORDS, True, False, MAX_PAYLOAD_BYTES
        )
    return end, failed


def scan_columns(buf: bytes, start: int, limit: int) -> Scan:
    """Scan and check up to ``limit`` message records of ``buf`` from ``start``, as columns.

    Stops where :func:`scan` stops; the result's ``columns`` hold the records.
    """
    import numpy as np

    if _native is not None:
        count, offsets, stamps, ids, starts, data, end, failed = _native.columns(
            buf, start, limit, MAX_PAYLOAD_BYTES
        )
        columns = Columns(
            np.frombuffer(offsets, dtype=np.int64),
            np.frombuffer(stamps, dtype=np.int64),
            np.frombuffer(ids, dtype=np.int64),
            np.frombuffer(starts, dtype=np.int32),
            data,
        )
    else:
        offset_list, stamp_list, id_list, end, failed = _walk_python(
            buf, start, limit, True, True, MAX_PAYLOAD_BYTES
        )
        count = len(offset_list)
        ends = [*offset_list[1:], end] if offset_list else []
        payloads = [buf[o + _HEADER_BYTES : e] for o, e in zip(offset_list, ends, strict=True)]
        sizes = np.fromiter((len(p) for p in payloads), dtype=np.int64, count=count)
        columns = Columns(
            np.array(offset_list, dtype=np.int64),
            np.array(stamp_list or [], dtype=np.int64),
            np.array(id_list or [], dtype=np.int64),
            np.concatenate(([0], np.cumsum(sizes))).astype(np.int32),
            b"".join(payloads),
        )
    result = Scan(start, stop_offset=end, columns=columns)
    _classify_stop(result, buf, failed or count < limit)
    return result


def _classify_stop(result: Scan, buf: bytes, stopped_early: bool) -> None:
    """Say why a walk that ended at ``result.stop_offset`` stopped."""
    if not stopped_early:
        result.stop = Stop.LIMIT
        return
    kind, _, problem = check_record(buf, result.stop_offset)
    if problem and problem != "incomplete":
        result.stop, result.reason = Stop.BAD, problem
    else:  # a valid range record stopped a checked walk; otherwise the buffer ended
        result.stop = Stop.RANGE if not problem and kind == KIND_RANGE else Stop.NEED_MORE


def _walk_python(
    buf: bytes, start: int, limit: int, verify: bool, decode: bool, max_payload: int
) -> tuple[list[int], list[int] | None, list[int] | None, int, bool]:
    """The walk in Python: ``(offsets, timestamps_ns, ids, end, failed)`` as ``_walk.walk``.

    Pass 1 walks the length fields only; pass 2 checks every record's CRC and
    fixed fields and cuts at the first failure.
    """
    offsets: list[int] = []
    append, length_of = offsets.append, _LENGTH.unpack_from
    n, off, header_bytes = len(buf), start, _HEADER_BYTES
    last_start = n - header_bytes
    for _ in range(limit):  # the last step may overshoot the buffer
        if off > last_start:
            break
        length = length_of(buf, off)[0]
        if length > max_payload:
            break
        append(off)
        off += header_bytes + length
    if off > n and offsets:  # the last record runs past the buffer
        off = offsets.pop()
    if not verify or not offsets:
        if verify and decode:
            return offsets, [], [], off, False
        return offsets, None, None, off, False
    ends = [*offsets[1:], off]
    cut, timestamps_ns, ids = _check_headers(buf, offsets, ends)
    failed = cut is not None
    if cut is not None:
        off = offsets[cut]
        del offsets[cut:]
    if not decode:
        return offsets, None, None, off, failed
    return offsets, timestamps_ns[: len(offsets)], ids[: len(offsets)], off, failed
