"""Every decoder that takes bytes from outside, fed random and mutated input.

Each one either returns a well-formed value or raises the one error its callers handle
(and count, and log); nothing else escapes, nothing hangs. ``make fuzz`` runs the same
properties with a far larger budget (``HYPOTHESIS_PROFILE=fuzz``).
"""

from __future__ import annotations

import asyncio
import json
import pickle
import struct
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.targets.frames import read_all_frames
from rt_appliance.config.load import ConfigError, parse_config
from rt_appliance.errors import FrameError
from rt_appliance.log.format import FileHeader, decode_file_header, encode_file_header
from rt_appliance.sequencer.control import _positions
from rt_appliance.sequencer.raft import restricted_loads
from rt_appliance.transport.framing import FRAME_HEADER, encode_frame
from rt_appliance.transport.messages import (
    decode_control,
    decode_data,
    decode_fetched,
    encode_data,
    encode_fetched,
    require,
)

pytestmark = pytest.mark.unit

EXAMPLE_CONFIG = (Path(__file__).parents[2] / "etc" / "rt.yaml").read_text()
LIMIT = 1 << 16


def _read_frames(data: bytes) -> list[tuple[int, bytes]]:
    """Every frame ``read_frame`` takes from ``data`` before it raises."""
    return asyncio.run(read_all_frames(data, LIMIT))[0]


@given(st.binary(max_size=512))
@example(FRAME_HEADER.pack(0, 1))  # a length of 0 cannot hold the type byte
@example(FRAME_HEADER.pack(LIMIT + 1, 1) + b"x" * 16)  # over the limit
@example(FRAME_HEADER.pack(0xFFFFFFFF, 1))  # the largest length a header can carry
def test_the_frame_reader_takes_whole_frames_or_stops_with_its_error(data: bytes) -> None:
    frames = _read_frames(data)
    consumed = sum(FRAME_HEADER.size + len(body) for _, body in frames)
    assert consumed <= len(data)
    at = 0
    for frame_type, body in frames:  # each frame is exactly what the bytes say
        length, kind = FRAME_HEADER.unpack_from(data, at)
        assert (kind, len(body)) == (frame_type, length - 1) and 1 <= length <= LIMIT
        assert data[at + FRAME_HEADER.size : at + FRAME_HEADER.size + len(body)] == body
        at += FRAME_HEADER.size + len(body)


@given(st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=64)), max_size=8))
def test_frames_written_are_read_back_exactly(frames: list[tuple[int, bytes]]) -> None:
    data = b"".join(b"".join(bytes(p) for p in encode_frame(t, b)) for t, b in frames)
    assert _read_frames(data) == frames


@given(st.integers(0, 255), st.binary(max_size=256))
def test_control_frames_are_json_objects_or_a_frame_error(frame_type: int, body: bytes) -> None:
    try:
        fields = decode_control(frame_type, body)
    except FrameError:
        return
    assert isinstance(fields, dict) and fields == json.loads(body)


@given(st.binary(max_size=256))
@example(struct.pack("<H", 0xFFFF))  # a name longer than the frame
def test_data_frames_decode_or_raise_a_frame_error(body: bytes) -> None:
    try:
        data = decode_data(body)
    except FrameError:
        return
    again = b"".join(bytes(p) for p in encode_data(data.dir, int(data.position), data.payload))
    assert again == body  # what decodes is exactly what would be sent


@given(st.binary(max_size=256))
def test_fetched_frames_decode_or_raise_a_frame_error(body: bytes) -> None:
    try:
        head, payload = decode_fetched(body)
    except FrameError:
        return
    assert isinstance(head, dict)
    assert b"".join(bytes(p) for p in encode_fetched(head, payload)).endswith(bytes(payload))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=12), json_values, max_size=8))
def test_a_report_keeps_only_positions(fields: dict[str, object]) -> None:
    kept = _positions(fields)
    assert set(kept) <= set(fields)
    for name, position in kept.items():
        assert type(position) is int and 0 <= position < 1 << 64 and fields[name] == position


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=4), st.text(max_size=4))
def test_require_returns_the_type_asked_for_or_a_frame_error(
    fields: dict[str, object], key: str
) -> None:
    for kind in (int, str, dict, list, bool):
        try:
            value = require(fields, key, kind)
        except FrameError:
            continue
        assert isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


class _Call:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("a global was called",))


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.binary(max_size=8) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
    ),
    max_leaves=12,
)


@given(plain)
def test_the_raft_decoder_reads_plain_data(value: object) -> None:
    for protocol in (4, 5):  # below 4, bytes are built by a global: refused by design
        assert restricted_loads(pickle.dumps(value, protocol=protocol)) == value


@given(st.binary(max_size=256), st.integers(0, 255))
def test_the_raft_decoder_never_builds_a_global(noise: bytes, at: int) -> None:
    evil = pickle.dumps({"type": "append_entries", "x": _Call()}, protocol=4)
    for data in (noise, evil, evil[: at % len(evil)] + noise, noise + evil):
        try:
            value = restricted_loads(data)
        except Exception:  # the transport refuses a frame that does not decode, and counts it
            continue
        assert "_Call" not in repr(value) and "print" not in repr(value)


@given(st.binary(max_size=128))
def test_a_file_header_decodes_or_says_why_not(data: bytes) -> None:
    found = decode_file_header(data)
    if isinstance(found, str):
        assert found
        return
    assert isinstance(found, FileHeader)
    again = encode_file_header(
        found.kind, found.session, found.roll, found.created_ns, found.topic, found.host
    )
    assert data[: found.header_bytes] == again


@given(st.data())
def test_a_damaged_file_header_is_refused_with_a_reason(data: st.DataObject) -> None:
    header = encode_file_header(1, data.draw(st.integers(0, 2**32 - 1)), 0, 7, "trades", "pub-1")
    at = data.draw(st.integers(0, len(header) - 1))
    flipped = bytearray(header)
    flipped[at] ^= 1 << data.draw(st.integers(0, 7))
    assert isinstance(decode_file_header(bytes(flipped)), str)


@given(st.text(max_size=200))
def test_any_yaml_text_is_a_config_or_a_config_error(text: str) -> None:
    try:
        parse_config(text, "rt.yaml")
    except ConfigError as exc:
        assert str(exc) and all(p.startswith("rt.yaml:") for p in exc.problems)


@given(st.data())
def test_a_mutated_example_config_is_a_config_or_a_config_error(data: st.DataObject) -> None:
    text = EXAMPLE_CONFIG
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 12))
        text = text[:at] + data.draw(st.text(max_size=12)) + text[at + cut :]
    try:
        parse_config(text, "rt.yaml")
    except ConfigError as exc:
        assert exc.problems and all(p.startswith("rt.yaml:") for p in exc.problems)
