"""Inputs the atheris harnesses (``fuzz/``) found that escaped a decoder's contract.

Each decoder returns a value or raises the one error its callers handle; these inputs
made one raise something else (or accept a header no writer writes) before the fix.
"""

from __future__ import annotations

import pickle
import resource
import time
import zlib
from pathlib import Path

import pytest

from rt_appliance.config.load import ConfigError, load_config, parse_config
from rt_appliance.errors import FrameError
from rt_appliance.limits import MAX_HOST_BYTES, MAX_TOPIC_BYTES
from rt_appliance.log.format import (
    FILE_KIND_MERGED,
    FILE_KIND_PUBLISHER,
    HEADER_CRC,
    HEADER_FIXED,
    MAGIC,
    FileHeader,
    decode_file_header,
)
from rt_appliance.sequencer.raft.codec import check_opcodes, dumps, restricted_loads
from rt_appliance.transport.messages import FrameType, decode_control

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 5000,  # nested deeper than the parser's recursion limit: RecursionError
        b'{"extents": {"in/t.h": ' + b"9" * 4301 + b"}}",  # int("9" * 4301): ValueError
    ],
    ids=["nested-too-deep", "integer-of-4301-digits"],
)
def test_a_control_frame_json_cannot_take_is_a_frame_error(body: bytes) -> None:
    with pytest.raises(FrameError, match="REPORT frame is not JSON"):
        decode_control(FrameType.REPORT, body)


def _header(
    kind: int = FILE_KIND_PUBLISHER, reserved: int = 0, topic: bytes = b"t", host: bytes = b"h"
) -> bytes:
    """A file header with a right CRC and any field values, even ones no writer writes."""
    size = HEADER_FIXED.size + len(topic) + len(host) + HEADER_CRC.size
    fixed = bytearray(HEADER_FIXED.pack(MAGIC, 1, kind, 1, 0, 0, size, len(topic), len(host)))
    fixed[11] = reserved
    body = bytes(fixed) + topic + host
    return body + HEADER_CRC.pack(zlib.crc32(body))


def test_a_file_header_with_a_field_no_writer_writes_is_refused() -> None:
    assert isinstance(decode_file_header(_header()), FileHeader)
    assert isinstance(decode_file_header(_header(FILE_KIND_MERGED)), FileHeader)
    refused = [
        _header(reserved=7),
        _header(kind=0),
        _header(kind=3),
        _header(topic=b"t" * (MAX_TOPIC_BYTES + 1)),
        _header(host=b"h" * (MAX_HOST_BYTES + 1)),
    ]
    for data in refused:
        assert isinstance(decode_file_header(data), str), data


def test_an_rt_yaml_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "rt.yaml"
    path.write_bytes(b"stream: \xff\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [f"{path}: not UTF-8 text: byte 8"]


@pytest.mark.parametrize(
    "text",
    [
        "stream: " + "9" * 4301,  # int() of more than 4300 digits: ValueError
        "stream: !!timestamp 2001-13-45",  # a 13th month: ValueError
        "- " * 1200 + "x",  # nested deeper than the parser's recursion limit
    ],
    ids=["integer-of-4301-digits", "month-13", "nested-too-deep"],
)
def test_rt_yaml_that_yaml_cannot_convert_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "rt.yaml")
    assert caught.value.problems[0].startswith("rt.yaml:1: not valid YAML: ")


def test_rt_yaml_aliases_that_hold_themselves_or_multiply_are_config_errors() -> None:
    laughs = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n"
        for p, k in zip("abcdefg", "bcdefgh", strict=True)
    )  # h holds 9**8 ones: walked node by node, its lines took minutes
    for text in ("stream: &x {a: *x}", "nodes: &x [*x]", laughs):
        with pytest.raises(ConfigError):
            parse_config(text, "rt.yaml")


@pytest.mark.parametrize(
    "frame",
    [
        b"\x80\x04Nr\x00\x00\x00\x04.",  # LONG_BINPUT 2**26: a 1 GiB memo
        b"\x80\x04Nr\xff\xff\xff\xff.",  # LONG_BINPUT 2**32-1: 64 GiB asked for
        b"\x80\x04Np99999999999\n.",  # PUT, protocol 0's spelling
        b"\x80\x04Nq\x05.",  # BINPUT: harmless in size, but never written by dumps
    ],
    ids=["long-binput-2^26", "long-binput-2^32", "put", "binput"],
)
def test_a_raft_frame_naming_a_memo_slot_is_refused_before_any_is_made(frame: bytes) -> None:
    """CPython's unpickler grows its memo to twice the index a PUT names and fills it;
    the raft decoder refuses the opcode instead, in microseconds and without memory."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(pickle.UnpicklingError, match="refused pickle opcode"):
        restricted_loads(frame)
    assert time.monotonic() - started < 0.5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB


def test_everything_the_raft_encoder_writes_passes_the_opcode_check() -> None:
    message = {
        "type": "append_entries", "term": 7, "commit_index": 2**70, "prevLogIdx": 99,
        "prevLogTerm": 7, "entries": [(b"x" * n, n, 7) for n in (0, 1, 255, 256, 70_000)],
        "shared": ["same"] * 3, "float": 1.5, "none": None, "flags": (True, False),
        "long_text": "é" * 300, "empty": ((), [], {}), "set": {1, 2}, "frozen": frozenset({3}),
    }  # fmt: skip
    data = dumps(message)
    check_opcodes(data)
    assert restricted_loads(data) == message
