"""Harness: the stream file header and the merged log's range record (``log/format.py``).

Input: a byte of modes, then the bytes. Mode bit 0 picks the decoder
(``decode_file_header`` on a file's first bytes, or ``decode_range`` on a range record's
payload); bit 1 first rewrites the header's CRC to match, so the fuzzer gets past the
CRC check (it cannot forge a CRC-32) to what lies behind it. A decoder returns a value
that encodes back to exactly the bytes it came from, or a reason (a string); it never
raises: readers turn the reason into ``CorruptLogError``.
"""

from __future__ import annotations

import zlib

from fuzz.targets import Target
from fuzz.targets.draw import Draw
from rt_appliance.errors import RecordTooLargeError
from rt_appliance.log.format import (
    HEADER_CRC,
    HEADER_FIXED,
    RECORD_HEADER,
    FileHeader,
    RangeHeader,
    decode_file_header,
    decode_range,
    encode_file_header,
    encode_range,
)

__all__ = ["FIX_CRC", "RANGE", "TARGET", "check", "input_for"]

RANGE, FIX_CRC = 1, 2


def input_for(data: bytes, mode: int = 0) -> bytes:
    """The harness input that feeds ``data`` to the decoder ``mode`` picks."""
    return bytes([mode]) + data


def seeds() -> list[bytes]:
    header = encode_file_header(1, 3, 0, 1_700_000_000_000_000_000, "trades", "pub-1")
    merged = encode_file_header(2, 1, 7, 5, "", "node-1")
    rng = encode_range(RangeHeader("trades", "pub-1", 1 << 44, 4096, 12), 5, 6)
    return [
        input_for(header),
        input_for(merged + b"\0" * 28, FIX_CRC),
        input_for(rng[RECORD_HEADER.size :], RANGE),
        input_for(b""),
    ]


def _fix_crc(data: bytes) -> bytes:
    """``data`` with the header CRC its declared size puts at its end made to match."""
    if len(data) < HEADER_FIXED.size:
        return data
    size = HEADER_FIXED.unpack_from(data)[6]
    if not HEADER_CRC.size <= size <= len(data):
        return data
    body = data[: size - HEADER_CRC.size]
    return body + HEADER_CRC.pack(zlib.crc32(body)) + data[size:]


def _check_header(data: bytes) -> None:
    found = decode_file_header(data)
    if isinstance(found, str):
        assert found, "a refusal without a reason"
        return
    assert isinstance(found, FileHeader)
    try:
        again = encode_file_header(
            found.kind, found.session, found.roll, found.created_ns, found.topic, found.host
        )
    except RecordTooLargeError as exc:
        raise AssertionError(f"decoded a header no writer can write: {exc}") from exc
    assert data[: found.header_bytes] == again, "the header decodes to something else"


def _check_range(payload: bytes) -> None:
    found = decode_range(payload)
    if isinstance(found, str):
        assert found, "a refusal without a reason"
        return
    assert encode_range(found, 0, 0)[RECORD_HEADER.size :] == payload


def check(data: bytes) -> None:
    draw = Draw(data)
    mode = draw.byte()
    rest = draw.rest()
    if mode & RANGE:
        _check_range(rest)
    else:
        _check_header(_fix_crc(rest) if mode & FIX_CRC else rest)


TARGET = Target("file_header", check, seeds, max_len=1024)
