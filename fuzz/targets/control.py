"""Harness: a request on the sequencer's control channel (``sequencer/control.py``).

Input: the frame type byte, then the frame body, decoded as the control server does:
JSON fields, then for REPORT the ``extents`` and ``holds`` objects cut down to positions
(``_positions``). A request either yields positions (integers in 0..2^64 under the
names the peer sent) or raises ``FrameError``, which the server answers with ERROR;
any other exception would end the connection's task without an answer.
"""

from __future__ import annotations

from typing import Any

from fuzz.targets import Target
from fuzz.targets.draw import Draw
from rt_appliance.errors import FrameError
from rt_appliance.sequencer.control import _positions
from rt_appliance.transport.messages import FrameType, decode_control, encode_control, require

__all__ = ["TARGET", "check", "input_for"]


def input_for(fields: dict[str, Any], frame_type: int = FrameType.REPORT) -> bytes:
    """The harness input of one request (for seeds and tests)."""
    return bytes([frame_type]) + encode_control(fields)


def seeds() -> list[bytes]:
    return [
        input_for({"extents": {"in/trades.pub-1": (3 << 44) | 4096, "merged": 0}}),
        input_for({"extents": {"in/t.h": 1}, "holds": {"spark-job": 7 << 30, "x": -1}}),
        input_for({"extents": {"a": True, "b": 1.5, "c": 1 << 64, "d": None}, "holds": []}),
        input_for({}, FrameType.STATUS),
    ]


def _report(fields: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """What ``ControlServer._report`` takes from a REPORT's fields (its checks, in order)."""
    extents = require(fields, "extents", dict)
    holds = fields.get("holds", {})
    if not isinstance(holds, dict):
        raise FrameError(f"frame field 'holds' is not an object: {holds!r}")
    return _positions(extents), _positions(holds)


def _check_positions(kept: dict[str, int], sent: dict[str, Any]) -> None:
    assert set(kept) <= set(sent)
    for name, position in kept.items():
        assert type(position) is int and 0 <= position < 1 << 64 and sent[name] == position


def check(data: bytes) -> None:
    draw = Draw(data)
    frame_type = draw.byte()
    body = draw.rest()
    try:
        fields = decode_control(frame_type, body)
        if frame_type == FrameType.REPORT:
            extents, holds = _report(fields)
            _check_positions(extents, fields["extents"])
            _check_positions(holds, fields.get("holds", {}))
    except FrameError as exc:
        assert str(exc)


TARGET = Target("control", check, seeds, max_len=8192)
