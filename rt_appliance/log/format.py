"""The byte format shared by publisher logs, node replicas and the merged log.

All integers are little-endian. CRCs are zlib's CRC-32 (ISO-HDLC polynomial,
the value of :func:`zlib.crc32`). Full specification: ``docs/LOG_FORMAT.md``.

File header (``HEADER_FIXED`` + topic + host + CRC, at offset 0 of every file)::

    0        8        10   11   12       16       20             28     30  31  32
    +--------+--------+----+----+--------+--------+--------------+------+---+---+-----+-----+-----+
    | magic  |version |kind|rsvd|session |  roll  |  created_ns  |hdr_sz|tl |hl |topic|host |crc32|
    | 8 B    | u16    | u8 | u8 | u32    | u32    |     i64      | u16  |u8 |u8 |tl B |hl B | u32 |
    +--------+--------+----+----+--------+--------+--------------+------+---+---+-----+-----+-----+
    header crc32 covers every header byte before it; hdr_sz = 36 + tl + hl.

Record (``RECORD_HEADER`` + payload, back to back after the file header)::

    0        4        8    9    10     12               20               28
    +--------+--------+----+----+------+----------------+----------------+-----------+
    | crc32  | length |kind|flag| rsvd |  timestamp_ns  |       id       |  payload  |
    | u32    | u32    | u8 | u8 | u16  |      i64       |      i64       | length B  |
    +--------+--------+----+----+------+----------------+----------------+-----------+
    crc32 covers bytes [4, 28 + length): length, kind, flags, reserved,
    timestamp, id and payload; everything in the record but the CRC itself.

Record kinds: ``KIND_MESSAGE`` (0) carries one message. ``KIND_RANGE`` (1) appears
only in the merged log: its payload (``RANGE_FIXED`` + topic + host) says that the
next ``range_bytes`` bytes are message records copied verbatim from the publisher
log ``topic.host`` starting at ``source_position``. The sequencer builds the merged
log by writing one range record and copying publisher bytes, without re-encoding.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from rt_appliance.errors import RecordTooLargeError
from rt_appliance.invariants import invariant
from rt_appliance.limits import (
    FETCH_BYTES,
    FOLLOW_CHUNK_BYTES,
    INPUT_SCAN_BYTES,
    MAX_FILE_HEADER_BYTES,
    MAX_HOST_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_TOPIC_BYTES,
    RANGE_READ_BYTES,
)

__all__ = [
    "FILE_KIND_MERGED",
    "FILE_KIND_PUBLISHER",
    "HEADER_FIXED",
    "KIND_MESSAGE",
    "KIND_RANGE",
    "MAGIC",
    "RECORD_HEADER",
    "VERSION",
    "FileHeader",
    "RangeHeader",
    "decode_file_header",
    "decode_range",
    "encode_batch",
    "encode_file_header",
    "encode_range",
    "encode_record",
]

MAGIC = b"\x89RTLOG\r\n"  # high bit and CR-LF catch 7-bit and newline-mangling copies
VERSION = 1
FILE_KIND_PUBLISHER = 1
FILE_KIND_MERGED = 2

HEADER_FIXED = struct.Struct(
    "<"
    "8s"  # magic
    "H"  # version
    "B"  # file kind: 1 publisher log (also a node's replica), 2 merged log
    "x"  # reserved, zero
    "I"  # session (X of log.X.Y)
    "I"  # roll (Y of log.X.Y)
    "q"  # created_ns: wall-clock ns when the file was started
    "H"  # header_bytes: the whole header, CRC included
    "B"  # topic length in bytes
    "B"  # host length in bytes
)
HEADER_CRC = struct.Struct("<I")

RECORD_HEADER = struct.Struct(
    "<"
    "I"  # crc32 of bytes [4, 28 + length)
    "I"  # length: payload bytes
    "B"  # kind: 0 message, 1 range header
    "B"  # flags, zero in version 1
    "H"  # reserved, zero
    "q"  # timestamp_ns
    "q"  # id (dedup topics: abs(id) advances by one per message)
)
_RECORD_BODY = struct.Struct(RECORD_HEADER.format.replace("<I", "<", 1))  # without the CRC
_CRC = struct.Struct("<I")

KIND_MESSAGE = 0
KIND_RANGE = 1

RANGE_FIXED = struct.Struct(
    "<"
    "q"  # source_position: where the copied bytes start in the publisher log
    "I"  # range_bytes: how many bytes of message records follow
    "I"  # record count in the range
    "B"  # topic length
    "B"  # host length
)

# The read sizes of rt_appliance.limits against this layout: a file header and a range
# record's payload, with the longest topic and host, each come whole in one read, and a
# read of records holds at least a record header.
invariant(
    HEADER_FIXED.size + MAX_TOPIC_BYTES + MAX_HOST_BYTES + HEADER_CRC.size <= MAX_FILE_HEADER_BYTES,
    "a file header is read whole",
)
invariant(
    RANGE_FIXED.size + MAX_TOPIC_BYTES + MAX_HOST_BYTES <= RANGE_READ_BYTES,
    "a range record's payload is read whole",
)
invariant(
    RECORD_HEADER.size <= min(FOLLOW_CHUNK_BYTES, INPUT_SCAN_BYTES, FETCH_BYTES),
    "a read of records holds a record header",
)


@dataclass(frozen=True, slots=True)
class FileHeader:
    """The decoded header of one stream file."""

    kind: int
    session: int
    roll: int
    created_ns: int
    topic: str
    host: str
    header_bytes: int


@dataclass(frozen=True, slots=True)
class RangeHeader:
    """A merged-log range: ``range_bytes`` of records copied from ``topic.host``."""

    topic: str
    host: str
    source_position: int
    range_bytes: int
    record_count: int


def encode_file_header(
    kind: int, session: int, roll: int, created_ns: int, topic: str, host: str
) -> bytes:
    """The header bytes that start file ``log.<session>.<roll>``."""
    topic_b, host_b = topic.encode(), host.encode()
    if len(topic_b) > MAX_TOPIC_BYTES or len(host_b) > MAX_HOST_BYTES:
        raise RecordTooLargeError(f"topic or host name too long: {topic!r} {host!r}")
    size = HEADER_FIXED.size + len(topic_b) + len(host_b) + HEADER_CRC.size
    body = (
        HEADER_FIXED.pack(
            MAGIC, VERSION, kind, session, roll, created_ns, size, len(topic_b), len(host_b)
        )
        + topic_b
        + host_b
    )
    return body + HEADER_CRC.pack(zlib.crc32(body))


def decode_file_header(data: bytes) -> FileHeader | str:
    """Decode a file header from the first bytes of a file.

    Returns the header, or a string saying why ``data`` is not a valid one
    (too short, wrong magic, unknown version, bad CRC, a field no writer writes).
    """
    if len(data) < HEADER_FIXED.size:
        return f"header needs {HEADER_FIXED.size} bytes, file has {len(data)}"
    magic, version, kind, session, roll, created, size, tlen, hlen = HEADER_FIXED.unpack_from(data)
    if magic != MAGIC:
        return f"bad magic {magic!r}"
    if version != VERSION:
        return f"unsupported format version {version}"
    if size != HEADER_FIXED.size + tlen + hlen + HEADER_CRC.size:
        return f"header size {size} does not match its name lengths"
    if len(data) < size:
        return f"header needs {size} bytes, file has {len(data)}"
    (crc,) = HEADER_CRC.unpack_from(data, size - HEADER_CRC.size)
    if zlib.crc32(data[: size - HEADER_CRC.size]) != crc:
        return "header CRC mismatch"
    if kind not in (FILE_KIND_PUBLISHER, FILE_KIND_MERGED) or data[11]:  # 11: reserved, 0
        return f"unknown file kind {kind} or reserved byte {data[11]}"
    if tlen > MAX_TOPIC_BYTES or hlen > MAX_HOST_BYTES:
        return f"topic of {tlen} or host of {hlen} bytes: longer than names can be"
    names = data[HEADER_FIXED.size : size - HEADER_CRC.size]
    try:
        topic, host = names[:tlen].decode(), names[tlen:].decode()
    except UnicodeDecodeError:
        return "topic or host is not UTF-8"
    return FileHeader(kind, session, roll, created, topic, host, size)


def encode_record(payload: bytes, timestamp_ns: int, id: int, kind: int = KIND_MESSAGE) -> bytes:
    """One record: CRC, fixed fields and ``payload``."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise RecordTooLargeError(f"payload of {len(payload)} bytes > {MAX_PAYLOAD_BYTES}")
    body = _RECORD_BODY.pack(len(payload), kind, 0, 0, timestamp_ns, id) + payload
    return _CRC.pack(zlib.crc32(body)) + body


def encode_batch(
    payloads: list[bytes], timestamp_ns: int, ids: list[int] | None
) -> tuple[bytes, list[int]]:
    """Encode message records back to back; returns the bytes and each record's size.

    ``ids`` None means id 0 for every message. This is the publisher's hot loop.
    """
    pack, crc, pack_crc = _RECORD_BODY.pack, zlib.crc32, _CRC.pack
    bodies = (
        [pack(len(p), 0, 0, 0, timestamp_ns, 0) + p for p in payloads]
        if ids is None
        else [
            pack(len(p), 0, 0, 0, timestamp_ns, i) + p for p, i in zip(payloads, ids, strict=True)
        ]
    )
    sizes = [len(b) + 4 for b in bodies]
    if max(sizes, default=0) > MAX_PAYLOAD_BYTES + RECORD_HEADER.size:
        raise RecordTooLargeError(f"a payload is larger than {MAX_PAYLOAD_BYTES} bytes")
    return b"".join([pack_crc(crc(b)) + b for b in bodies]), sizes


def encode_range(header: RangeHeader, timestamp_ns: int, id: int) -> bytes:
    """The merged log's range record announcing ``header.range_bytes`` copied bytes."""
    topic_b, host_b = header.topic.encode(), header.host.encode()
    payload = (
        RANGE_FIXED.pack(
            header.source_position,
            header.range_bytes,
            header.record_count,
            len(topic_b),
            len(host_b),
        )
        + topic_b
        + host_b
    )
    return encode_record(payload, timestamp_ns, id, KIND_RANGE)


def decode_range(payload: bytes) -> RangeHeader | str:
    """Decode a range record's payload, or say why it is not one."""
    if len(payload) < RANGE_FIXED.size:
        return "range record too short"
    position, nbytes, count, tlen, hlen = RANGE_FIXED.unpack_from(payload)
    if len(payload) != RANGE_FIXED.size + tlen + hlen:
        return "range record names do not match their lengths"
    names = payload[RANGE_FIXED.size :]
    try:
        return RangeHeader(names[:tlen].decode(), names[tlen:].decode(), position, nbytes, count)
    except UnicodeDecodeError:
        return "range record names are not UTF-8"
