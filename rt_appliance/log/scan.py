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

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log.format import KIND_MESSAGE, KIND_RANGE, RECORD_HEADER

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


def _stop_after_walk(result: Scan, buf: bytes, off: int, limit: int) -> None:
    """Why an unverified walk stopped at ``off`` (every record before it taken as valid)."""
    if len(result.offsets) >= limit:
        result.stop = Stop.LIMIT
        return
    kind, _, problem = check_record(buf, off)
    if problem == "incomplete" or not problem:
        result.stop = Stop.RANGE if not problem and kind == KIND_RANGE else Stop.NEED_MORE
    else:
        result.stop, result.reason = Stop.BAD, problem


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

    With ``decode`` False only offsets are collected (verification, recovery);
    with ``payloads`` False, timestamps and ids but no payload copies.
    Written for speed: pass 1 walks the length fields only, the later passes are
    list comprehensions over the offsets it found.
    """
    result = Scan(start)
    offsets = result.offsets
    append, length_of = offsets.append, _LENGTH.unpack_from
    n, off, header_bytes = len(buf), start, _HEADER_BYTES
    last_start = n - header_bytes
    # Pass 1: walk the length fields; the last step may overshoot the buffer.
    for _ in range(limit):
        if off > last_start:
            break
        append(off)
        off += header_bytes + length_of(buf, off)[0]
    if off > n:  # the last record runs past the buffer (or has an absurd length)
        off = offsets.pop()
    ends = offsets[1:]
    if offsets:
        ends.append(off)
    # Pass 2: every record's CRC and fixed fields; cut at the first failure.
    if not verify:  # record boundaries only: the caller checks CRCs itself (DirectorySource)
        _stop_after_walk(result, buf, off, limit)
        result.stop_offset = ends[-1] if ends else start
        return result
    cut, timestamps_ns, ids = _check_headers(buf, offsets, ends)
    if cut is not None:
        del offsets[cut:], ends[cut:]
        kind, _, problem = check_record(buf, ends[-1] if ends else start)
        result.stop = Stop.RANGE if not problem and kind == KIND_RANGE else Stop.BAD
        result.reason = problem
    elif len(offsets) >= limit:
        result.stop = Stop.LIMIT
    else:
        kind, _, problem = check_record(buf, off)
        if problem == "incomplete":
            result.stop = Stop.NEED_MORE
        elif problem:
            result.stop, result.reason = Stop.BAD, problem
        else:  # a valid record that pass 1 could not take whole: cannot happen
            result.stop = Stop.RANGE if kind == KIND_RANGE else Stop.NEED_MORE
    result.stop_offset = ends[-1] if ends else start
    if decode:
        result.timestamps_ns, result.ids = timestamps_ns[: len(offsets)], ids[: len(offsets)]
        if payloads:
            result.payloads = [
                buf[o + header_bytes : e] for o, e in zip(offsets, ends, strict=True)
            ]
    return result
