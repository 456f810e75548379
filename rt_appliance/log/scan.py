"""Scanning records out of a buffer: the hot loop of every reader.

:func:`scan` is pure: bytes in, a :class:`Scan` out. It stops at the end of the
buffer, at a limit of records, at a range record (merged log) or at the first
record that fails a check; deciding whether a failure is a torn tail or
corruption needs the rest of the file, which is :mod:`rt_appliance.log.reader`'s job.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import Enum
from types import ModuleType

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log.format import KIND_MESSAGE, KIND_RANGE, RECORD_HEADER

_native: ModuleType | None
try:
    import rt_appliance.log._walk as _native
except ImportError:  # built without a C compiler: the Python walk below
    _native = None

__all__ = ["Scan", "Stop", "check_record", "scan"]

_HEADER_BYTES = RECORD_HEADER.size
_LENGTH = struct.Struct("<4xI")  # just the length field of a record header
# The record header as a numpy record, with kind, flags and reserved read as one
# u32 (zero for a message record): pass 2 gathers every header of a buffer at once.
_HEADER_DTYPE = np.dtype(
    [
        ("crc", "<u4"),
        ("length", "<u4"),
        ("kind_flags", "<u4"),
        ("timestamp_ns", "<i8"),
        ("id", "<i8"),
    ]
)
_EMPTY_HEADERS = np.zeros(0, dtype=_HEADER_DTYPE)
_SCAN_HEADER = struct.Struct("<IIIqq")  # the same header, for the few-records path
_NUMPY_MIN_RECORDS = 64  # below this a plain loop beats numpy's per-call cost


def _gather_headers(buf: bytes, offsets: list[int]) -> np.ndarray:
    """The record headers at ``offsets`` of ``buf``, as one structured array."""
    if not offsets:
        return _EMPTY_HEADERS
    windows = sliding_window_view(np.frombuffer(buf, dtype=np.uint8), _HEADER_BYTES)
    rows = windows[np.array(offsets, dtype=np.intp)]  # a copy: (len(offsets), 28) bytes
    return rows.view(_HEADER_DTYPE).ravel()


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
    if len(offsets) < _NUMPY_MIN_RECORDS:
        rows = [_SCAN_HEADER.unpack_from(buf, o) for o in offsets]
        bad = [r[0] != c or r[2] != 0 for r, c in zip(rows, crcs, strict=True)]
        cut = bad.index(True) if True in bad else None
        return cut, [r[3] for r in rows], [r[4] for r in rows]
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
class Scan:
    """Records found back to back from ``start``; ``stop_offset`` is where scanning stopped."""

    start: int
    offsets: list[int] = field(default_factory=list)
    timestamps_ns: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    stop: Stop = Stop.NEED_MORE
    stop_offset: int = 0
    reason: str = ""


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
    if failed or len(offsets) < limit:
        kind, _, problem = check_record(buf, end)
        if problem and problem != "incomplete":
            result.stop, result.reason = Stop.BAD, problem
        else:  # a valid range record stopped a checked walk; otherwise the buffer ended
            result.stop = Stop.RANGE if not problem and kind == KIND_RANGE else Stop.NEED_MORE
    else:
        result.stop = Stop.LIMIT
    if decode and verify and timestamps_ns is not None and ids is not None:
        result.timestamps_ns, result.ids = timestamps_ns, ids
        if payloads:
            ends = [*offsets[1:], end] if offsets else []
            result.payloads = [
                buf[o + _HEADER_BYTES : e] for o, e in zip(offsets, ends, strict=True)
            ]
    return result


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
