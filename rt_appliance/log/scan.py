"""Scanning records out of a buffer: the hot loop of every reader.

:func:`scan` is pure: bytes in, a :class:`Scan` out. It stops at the end of the
buffer, at a limit of records, at a range record (merged log) or at the first
record that fails a check; deciding whether a failure is a torn tail or
corruption needs the rest of the file, which is :mod:`rt_appliance.log.reader`'s job.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from enum import Enum

from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log.format import KIND_MESSAGE, KIND_RANGE, RECORD_HEADER

__all__ = ["Scan", "Stop", "check_record", "scan"]

_HEADER_BYTES = RECORD_HEADER.size


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


def scan(buf: bytes, start: int, limit: int, decode: bool = True) -> Scan:
    """Scan up to ``limit`` message records of ``buf`` from ``start``.

    With ``decode`` False only offsets are collected (verification, recovery).
    """
    result = Scan(start)
    offsets = result.offsets
    heads: list[tuple[int, int, int, int, int, int, int]] = []
    n, off, max_len, header_bytes = len(buf), start, MAX_PAYLOAD_BYTES, _HEADER_BYTES
    unpack = RECORD_HEADER.unpack_from
    # Pass 1: walk the headers. Cheap, and bounds the work of pass 2.
    for _ in range(limit):
        if off + header_bytes > n:
            break
        head = unpack(buf, off)
        end = off + header_bytes + head[1]
        if end > n or head[1] > max_len:
            break
        offsets.append(off)
        heads.append(head)
        off = end
    ends = offsets[1:]
    if offsets:
        ends.append(off)
    # Pass 2: every record's CRC and fixed fields; cut at the first failure.
    crc = zlib.crc32
    good = [
        h[0] == crc(buf[o + 4 : e]) and not (h[2] or h[3] or h[4])
        for o, e, h in zip(offsets, ends, heads, strict=True)
    ]
    if False in good:
        cut = good.index(False)
        del offsets[cut:], heads[cut:], ends[cut:]
        kind, _, problem = check_record(buf, ends[-1] if ends else start)
        result.stop = Stop.RANGE if not problem and kind == KIND_RANGE else Stop.BAD
        result.reason = problem
    else:
        kind, _, problem = check_record(buf, off) if len(offsets) < limit else (0, 0, "")
        if len(offsets) >= limit:
            result.stop = Stop.LIMIT
        elif problem == "incomplete":
            result.stop = Stop.NEED_MORE
        elif problem:
            result.stop, result.reason = Stop.BAD, problem
        else:  # a valid record pass 1 did not take: a range record
            result.stop = Stop.RANGE
    result.stop_offset = ends[-1] if ends else start
    if decode:
        result.timestamps_ns = [h[5] for h in heads]
        result.ids = [h[6] for h in heads]
        result.payloads = [buf[o + _HEADER_BYTES : e] for o, e in zip(offsets, ends, strict=True)]
    return result
