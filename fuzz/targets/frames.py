"""Harness: the frame reader (``transport/framing.read_frame``) on whatever a peer sends.

Input: a byte picking the connection's frame limit, a byte picking the slice size
(small slices make the large-frame path run on small inputs), then the bytes received.
The reader must hand out exactly the frames the bytes hold and then stop with the error
that says why: ``FrameError`` for a length of 0 or over the limit, ``TransportError``
for a stream that ends between or inside frames.
"""

from __future__ import annotations

import asyncio
import atexit

from fuzz.targets import Target
from fuzz.targets.draw import Draw
from rt_appliance.errors import FrameError, TransportError
from rt_appliance.transport import framing
from rt_appliance.transport.framing import FRAME_HEADER, encode_frame, read_frame

__all__ = ["TARGET", "check", "input_for", "read_all_frames"]

LIMITS = (1 << 16, 1, 2, 5, 64)
_HEAD = FRAME_HEADER.size


def input_for(stream: bytes, limit_index: int = 0, slice_bytes: int = 255) -> bytes:
    """The harness input that feeds ``stream`` to the reader (for seeds and tests)."""
    return bytes([limit_index, slice_bytes - 1]) + stream


def seeds() -> list[bytes]:
    def frames(*pairs: tuple[int, bytes]) -> bytes:
        return b"".join(bytes(p) for t, b in pairs for p in encode_frame(t, b))

    hello = frames((1, b'{"role":"push","host":"pub-1","stream":"s","version":1}'))
    return [
        input_for(b""),
        input_for(hello),
        input_for(frames((5, b"x" * 300), (6, b"{}")), slice_bytes=16),
        input_for(frames((7, b"abc"))[:-1]),  # cut inside the body
        input_for(FRAME_HEADER.pack(0, 1)),  # a length of 0 cannot hold the type byte
        input_for(frames((3, b"12345")), limit_index=3),  # over a 5-byte limit
    ]


async def read_all_frames(stream: bytes, limit: int) -> tuple[list[tuple[int, bytes]], Exception]:
    """Every frame ``read_frame`` takes from ``stream``, and the error it then raised."""
    reader = asyncio.StreamReader()
    reader.feed_data(stream)
    reader.feed_eof()
    frames: list[tuple[int, bytes]] = []
    while True:
        try:
            frames.append(await read_frame(reader, limit))
        except (FrameError, TransportError) as exc:
            return frames, exc


_loop: asyncio.AbstractEventLoop | None = None


def _run(stream: bytes, limit: int, slice_bytes: int) -> tuple[list[tuple[int, bytes]], Exception]:
    """Read every frame of ``stream`` on one event loop kept for all inputs (a new loop per
    input would cost more than the read)."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        atexit.register(_loop.close)
    saved = framing.SLICE_BYTES
    framing.SLICE_BYTES = slice_bytes
    try:
        return _loop.run_until_complete(read_all_frames(stream, limit))
    finally:
        framing.SLICE_BYTES = saved


def check(data: bytes) -> None:
    draw = Draw(data)
    limit = draw.choice(LIMITS)
    slice_bytes = 1 + draw.byte()
    stream = draw.rest()
    frames, error = _run(stream, limit, slice_bytes)
    at = 0
    for frame_type, body in frames:  # each frame is exactly what the bytes say
        length, kind = FRAME_HEADER.unpack_from(stream, at)
        assert (kind, len(body)) == (frame_type, length - 1) and 1 <= length <= limit
        assert bytes(body) == stream[at + _HEAD : at + _HEAD + len(body)]
        at += _HEAD + len(body)
    rest = stream[at:]
    expected: type[Exception] = TransportError  # the stream ended between or inside frames
    if len(rest) >= _HEAD:
        length = FRAME_HEADER.unpack_from(rest)[0]
        if not 1 <= length <= limit:
            expected = FrameError
        else:
            assert len(rest) - _HEAD < length - 1, "a whole frame was left unread"
    assert type(error) is expected, f"stopped with {error!r}, expected {expected.__name__}"


TARGET = Target("frames", check, seeds)
