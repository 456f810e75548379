"""Harness: the push/pull protocol's frame bodies (``transport/messages.py``).

Input: a byte picking the decoder (a control frame's JSON, a DATA body, a FETCHED body)
and, for control frames, the frame type; then the frame body. Each decoder returns what
the bytes hold (a DATA body encodes back to the same bytes) or raises ``FrameError``
(the connection answers ERROR and closes); anything else would escape the server's
handler. ``require`` then reads the decoded fields as a handler does.
"""

from __future__ import annotations

from typing import Any

from fuzz.targets import Target
from fuzz.targets.draw import Draw
from rt_appliance.errors import FrameError
from rt_appliance.transport.messages import (
    FrameType,
    decode_control,
    decode_data,
    decode_fetched,
    encode_control,
    encode_data,
    encode_fetched,
    require,
)

__all__ = ["TARGET", "check", "input_for"]

CONTROL, DATA, FETCHED = 0, 1, 2
_KINDS: tuple[type, ...] = (int, str, dict, list, bool)


def input_for(decoder: int, body: bytes, frame_type: int = FrameType.HELLO) -> bytes:
    """The harness input that feeds ``body`` to ``decoder`` (for seeds and tests)."""
    return bytes([decoder, frame_type]) + body


def _joined(pieces: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(p) for p in pieces)


def seeds() -> list[bytes]:
    hello = {"role": "push", "host": "pub-1", "stream": "s", "version": 1}
    head = {"dir": "t.pub-1", "position": 17 << 44, "file_size": 4096, "next_file": None,
            "oldest": 0, "missing": False}  # fmt: skip
    return [
        input_for(CONTROL, encode_control(hello)),
        input_for(CONTROL, encode_control({"dir": "t.h", "position": 123}), FrameType.RESUME),
        input_for(CONTROL, encode_control({"message": "no", "retryable": True}), FrameType.ERROR),
        input_for(DATA, _joined(encode_data("trades.pub-1", 1 << 44, b"records"))),
        input_for(FETCHED, _joined(encode_fetched(head, b"file bytes"))),
        input_for(FETCHED, _joined(encode_fetched({}, b""))),
    ]


def _read_fields(fields: dict[str, Any]) -> None:
    """Read a few fields the way handlers do: each is the type asked for or a FrameError."""
    for key in [*list(fields)[:4], "position"]:
        for kind in _KINDS:
            try:
                value = require(fields, key, kind)
            except FrameError:
                continue
            assert isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def check(data: bytes) -> None:
    draw = Draw(data)
    decoder = draw.byte() % 3
    frame_type = draw.byte()
    body = draw.rest()
    try:
        if decoder == CONTROL:
            fields = decode_control(frame_type, body)
            assert isinstance(fields, dict)
            _read_fields(fields)
        elif decoder == DATA:
            frame = decode_data(body)
            again = _joined(encode_data(frame.dir, int(frame.position), frame.payload))
            assert again == body, "a DATA body decodes to something else than it says"
        else:
            head, payload = decode_fetched(body)
            assert isinstance(head, dict)
            head_bytes = int.from_bytes(body[:2], "little")
            assert bytes(payload) == body[2 + head_bytes :], "FETCHED bytes are not the rest"
            _read_fields(head)
    except FrameError as exc:
        assert str(exc)


TARGET = Target("messages", check, seeds, max_len=8192)
