"""Round trips of the byte format: records, batches, file headers, range records, scanning."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rt_appliance.errors import RecordTooLargeError
from rt_appliance.limits import MAX_HOST_BYTES, MAX_TOPIC_BYTES
from rt_appliance.log import scan as scan_module
from rt_appliance.log.format import (
    FILE_KIND_MERGED,
    FILE_KIND_PUBLISHER,
    HEADER_FIXED,
    KIND_MESSAGE,
    KIND_RANGE,
    MAGIC,
    RECORD_HEADER,
    FileHeader,
    RangeHeader,
    decode_file_header,
    decode_range,
    encode_batch,
    encode_file_header,
    encode_range,
    encode_record,
)
from rt_appliance.log.scan import Stop, check_record, scan

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module", autouse=True, params=["compiled", "python"])
def walk_implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs with the compiled record walk and with the Python one."""
    if request.param == "compiled" and scan_module._native is None:
        pytest.skip("the package was built without the compiled walk (no C compiler)")
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "python":
            mp.setattr(scan_module, "_native", None)
        yield request.param


i64 = st.integers(-(2**63), 2**63 - 1)
payload = st.binary(max_size=300)
name_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), min_size=0, max_size=30
)


@given(payload, i64, i64)
def test_record_round_trips_through_scan(data: bytes, ts: int, rid: int) -> None:
    record = encode_record(data, ts, rid)
    assert len(record) == RECORD_HEADER.size + len(data)
    result = scan(record, 0, 10)
    assert result.payloads == [data]
    assert result.timestamps_ns == [ts]
    assert result.ids == [rid]
    assert result.offsets == [0]
    assert result.stop is Stop.NEED_MORE
    assert result.stop_offset == len(record)
    assert check_record(record, 0) == (KIND_MESSAGE, len(record), "")


@given(st.lists(payload, max_size=40), i64, st.data())
def test_batch_round_trips_and_matches_single_records(
    items: list[bytes], ts: int, data: st.DataObject
) -> None:
    ids = data.draw(st.none() | st.lists(i64, min_size=len(items), max_size=len(items)))
    blob, sizes = encode_batch(items, ts, ids)
    expected_ids = [0] * len(items) if ids is None else ids
    assert blob == b"".join(
        encode_record(p, ts, i) for p, i in zip(items, expected_ids, strict=True)
    )
    assert sizes == [RECORD_HEADER.size + len(p) for p in items]
    assert sum(sizes) == len(blob)
    prefix = b"\x00" * 7
    result = scan(prefix + blob, len(prefix), 1000)
    assert result.payloads == items
    assert result.ids == expected_ids
    assert result.timestamps_ns == [ts] * len(items)
    starts = [len(prefix) + sum(sizes[:k]) for k in range(len(items))]
    assert result.offsets == starts
    assert result.stop_offset == len(prefix) + len(blob)


@given(st.lists(payload, min_size=1, max_size=20), st.integers(1, 25))
def test_scan_limit_stops_at_record_boundary(items: list[bytes], limit: int) -> None:
    blob, sizes = encode_batch(items, 5, None)
    result = scan(blob, 0, limit)
    taken = min(limit, len(items))
    assert result.payloads == items[:taken]
    assert result.stop_offset == sum(sizes[:taken])
    assert result.stop is (Stop.LIMIT if limit <= len(items) else Stop.NEED_MORE)


@given(st.lists(payload, min_size=1, max_size=10), st.data())
def test_scan_stops_before_a_torn_record(items: list[bytes], data: st.DataObject) -> None:
    blob, sizes = encode_batch(items, 1, None)
    cut = data.draw(st.integers(0, len(blob) - 1))
    result = scan(blob[:cut], 0, 100)
    whole = sum(1 for k in range(len(items)) if sum(sizes[: k + 1]) <= cut)
    assert result.payloads == items[:whole]
    assert result.stop is Stop.NEED_MORE
    assert result.stop_offset == sum(sizes[:whole])


@given(st.lists(payload, min_size=1, max_size=10), st.data())
def test_scan_stops_at_a_damaged_record(items: list[bytes], data: st.DataObject) -> None:
    blob, sizes = encode_batch(items, 1, None)
    victim = data.draw(st.integers(0, len(items) - 1))
    start = sum(sizes[:victim])
    # damage a byte the CRC covers, other than the length field (which moves the end)
    at = data.draw(st.sampled_from([0, 8, 12, 20, *range(28, sizes[victim])]))
    damaged = bytearray(blob)
    damaged[start + at] ^= 0x01
    result = scan(bytes(damaged), 0, 100)
    assert result.payloads == items[:victim]
    assert result.stop is Stop.BAD
    assert result.stop_offset == start
    assert check_record(bytes(damaged), start)[2] != ""


def test_scan_stops_before_a_range_record() -> None:
    header = RangeHeader("t", "h", 0, 0, 0)
    blob = encode_record(b"a", 1, 2) + encode_range(header, 3, 4) + encode_record(b"b", 1, 2)
    result = scan(blob, 0, 100)
    assert result.payloads == [b"a"]
    assert result.stop is Stop.RANGE
    assert result.stop_offset == RECORD_HEADER.size + 1


def test_unknown_kind_or_flags_is_bad_even_with_a_good_crc() -> None:
    record = bytearray(encode_record(b"xyz", 1, 2))
    record[9] = 1  # flags
    record[:4] = struct.pack("<I", zlib.crc32(bytes(record[4:])))
    assert check_record(bytes(record), 0)[2].startswith("unknown kind")
    assert scan(bytes(record), 0, 10).stop is Stop.BAD
    other = bytearray(encode_record(b"xyz", 1, 2))
    other[8] = 7  # kind
    other[:4] = struct.pack("<I", zlib.crc32(bytes(other[4:])))
    assert scan(bytes(other), 0, 10).stop is Stop.BAD


def test_a_huge_length_is_bad_not_incomplete() -> None:
    record = bytearray(encode_record(b"", 1, 2))
    record[4:8] = struct.pack("<I", 0xFFFF_FFFF)
    result = scan(bytes(record), 0, 10)
    assert result.stop is Stop.BAD
    assert "exceeds" in result.reason


def test_oversized_payload_is_refused() -> None:
    from rt_appliance.limits import MAX_PAYLOAD_BYTES

    big = bytes(MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(RecordTooLargeError):
        encode_record(big, 0, 0)
    with pytest.raises(RecordTooLargeError):
        encode_batch([b"x", big], 0, None)


topics = st.text("abcXYZ019_-", min_size=0, max_size=MAX_TOPIC_BYTES)
hosts = st.text("abc.-_9", min_size=0, max_size=MAX_HOST_BYTES)


@given(
    st.sampled_from([FILE_KIND_PUBLISHER, FILE_KIND_MERGED]),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    i64,
    topics,
    hosts,
)
def test_file_header_round_trips(
    kind: int, session: int, roll: int, created: int, topic: str, host: str
) -> None:
    data = encode_file_header(kind, session, roll, created, topic, host)
    assert data.startswith(MAGIC)
    assert len(data) == HEADER_FIXED.size + len(topic) + len(host) + 4
    decoded = decode_file_header(data + b"trailing record bytes")
    assert decoded == FileHeader(kind, session, roll, created, topic, host, len(data))


@given(topics, hosts, st.data())
def test_damaged_or_short_file_header_is_refused(
    topic: str, host: str, data: st.DataObject
) -> None:
    header = encode_file_header(FILE_KIND_PUBLISHER, 1, 0, 5, topic, host)
    cut = data.draw(st.integers(0, len(header) - 1))
    assert isinstance(decode_file_header(header[:cut]), str)
    at = data.draw(st.integers(0, len(header) - 1))
    damaged = bytearray(header)
    damaged[at] ^= data.draw(st.integers(1, 255))
    assert isinstance(decode_file_header(bytes(damaged)), str)


def test_file_header_with_non_utf8_name_is_refused_and_long_names_too() -> None:
    with pytest.raises(RecordTooLargeError):
        encode_file_header(1, 1, 0, 0, "t" * (MAX_TOPIC_BYTES + 1), "h")
    body = HEADER_FIXED.pack(MAGIC, 1, 1, 1, 0, 0, HEADER_FIXED.size + 1 + 1 + 4, 1, 1)
    body += b"\xff" + b"h"
    assert decode_file_header(body + struct.pack("<I", zlib.crc32(body))) == (
        "topic or host is not UTF-8"
    )


@given(
    name_text.filter(lambda t: len(t.encode()) <= 255),
    name_text.filter(lambda t: len(t.encode()) <= 255),
    i64,
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    i64,
    i64,
)
def test_range_record_round_trips(
    topic: str, host: str, source: int, nbytes: int, count: int, ts: int, rid: int
) -> None:
    header = RangeHeader(topic, host, source, nbytes, count)
    record = encode_range(header, ts, rid)
    kind, end, problem = check_record(record, 0)
    assert (kind, end, problem) == (KIND_RANGE, len(record), "")
    result = scan(record, 0, 10)
    assert result.stop is Stop.RANGE and result.offsets == []
    assert decode_range(record[RECORD_HEADER.size :]) == header
    assert RECORD_HEADER.unpack_from(record)[5:] == (ts, rid)


def test_range_payload_problems_are_reported() -> None:
    assert decode_range(b"short") == "range record too short"
    payload = encode_range(RangeHeader("t", "h", 1, 2, 3), 0, 0)[RECORD_HEADER.size :]
    assert "lengths" in str(decode_range(payload + b"x"))
