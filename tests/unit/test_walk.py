"""The compiled record walk gives exactly the Python walk's results, on any bytes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log import scan as scan_module
from rt_appliance.log.format import RangeHeader, encode_batch, encode_range
from rt_appliance.log.scan import _walk_python

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(scan_module._native is None, reason="built without the compiled walk"),
]


@st.composite
def stream_bytes(draw: st.DrawFn) -> bytes:
    """Records as a log holds them, maybe with a range record, damage and a torn end."""
    payloads = draw(st.lists(st.binary(max_size=200), max_size=30))
    ids = draw(st.none() | st.just(list(range(1, len(payloads) + 1))))
    blob = bytearray(draw(st.binary(max_size=9)))  # a prefix the walk may start inside
    records, _ = encode_batch(payloads, draw(st.integers(0, 2**62)), ids)
    blob += records
    if draw(st.booleans()):
        blob += encode_range(RangeHeader("t", "h", 0, 10, 1), 5, 6)
        blob += encode_batch([b"after the range"], 7, None)[0]
    if blob and draw(st.booleans()):  # flip one bit anywhere, length fields included
        at = draw(st.integers(0, len(blob) - 1))
        blob[at] ^= 1 << draw(st.integers(0, 7))
    if draw(st.booleans()):
        blob = blob[: draw(st.integers(0, len(blob)))]
    return bytes(blob)


@settings(max_examples=400)
@given(stream_bytes(), st.data())
def test_compiled_walk_matches_python(blob: bytes, data: st.DataObject) -> None:
    assert scan_module._native is not None
    start = data.draw(st.integers(0, len(blob) + 2))
    limit = data.draw(st.sampled_from([0, 1, 3, 1 << 30]))
    max_payload = data.draw(st.sampled_from([MAX_PAYLOAD_BYTES, 50]))
    for verify in (True, False):
        for decode in (True, False):
            args = (blob, start, limit, verify, decode, max_payload)
            assert scan_module._native.walk(*args) == _walk_python(*args)


def test_compiled_walk_reads_any_buffer_and_checks_arguments() -> None:
    assert scan_module._native is not None
    record = encode_batch([b"abc"], 1, [2])[0]
    walk = scan_module._native.walk
    for buf in (record, bytearray(record), memoryview(record)):
        assert walk(buf, 0, 10, True, True, MAX_PAYLOAD_BYTES) == ([0], [1], [2], 31, False)
    with pytest.raises(TypeError):
        walk("not bytes", 0, 10, True, True, MAX_PAYLOAD_BYTES)  # type: ignore[arg-type]


@settings(max_examples=300)
@given(stream_bytes(), st.data())
def test_compiled_columns_match_the_python_walk(blob: bytes, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(blob) + 2))
    limit = data.draw(st.sampled_from([0, 1, 3, 1 << 30]))
    native = scan_module.scan_columns(blob, start, limit)
    saved, scan_module._native = scan_module._native, None
    try:
        python = scan_module.scan_columns(blob, start, limit)
        lists = scan_module.scan(blob, start, limit)
    finally:
        scan_module._native = saved
    for got in (native, python):
        columns = got.columns
        assert columns is not None
        assert (got.stop, got.stop_offset, got.reason) == (
            lists.stop,
            lists.stop_offset,
            lists.reason,
        )
        assert columns.offsets.tolist() == lists.offsets
        assert columns.timestamps_ns.tolist() == lists.timestamps_ns
        assert columns.ids.tolist() == lists.ids
        starts = columns.value_offsets.tolist()
        assert [columns.data[a:b] for a, b in itertools.pairwise(starts)] == lists.payloads
