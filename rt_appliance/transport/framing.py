"""Length-prefixed frames over an asyncio stream.

::

    0        4      5
    +--------+------+---------------------+
    | length | type |        body         |
    | u32 LE |  u8  | length - 1 bytes    |
    +--------+------+---------------------+

``length`` counts the type byte and the body. A frame longer than the
connection's ``max_frame_bytes`` is a protocol error: the connection is closed
before the body is read. TLS, socket and end-of-stream errors become
:class:`TransportError`; malformed frames :class:`FrameError`.

Large frames move in slices of ``SLICE_BYTES``: a body is read into one buffer of
its size (not grown in the stream's buffer and copied out), and written a slice at
a time, waiting for the transport to drain in between, so TLS never holds an
encrypted copy of a whole frame. A connection's memory is then about one frame.
"""

from __future__ import annotations

import asyncio
import ssl
import struct

from rt_appliance.errors import FrameError, TransportError
from rt_appliance.limits import SLICE_BYTES

__all__ = [
    "FRAME_HEADER",
    "SLICE_BYTES",
    "encode_frame",
    "read_frame",
    "write_frame",
    "write_pieces",
]

FRAME_HEADER = struct.Struct("<IB")


def encode_frame(frame_type: int, body: bytes | memoryview) -> list[bytes | memoryview]:
    """The pieces of one frame, ready for ``writelines`` (the body is not copied)."""
    return [FRAME_HEADER.pack(len(body) + 1, frame_type), body]


async def read_frame(reader: asyncio.StreamReader, max_frame_bytes: int) -> tuple[int, bytes]:
    """The next frame's type and body."""
    try:
        head = await reader.readexactly(FRAME_HEADER.size)
        length, frame_type = FRAME_HEADER.unpack(head)
        if length < 1 or length > max_frame_bytes:
            raise FrameError(f"frame of {length} bytes (limit {max_frame_bytes})")
        if length - 1 <= SLICE_BYTES:
            body = await reader.readexactly(length - 1)
        else:
            body = await _read_sliced(reader, length - 1)
    except asyncio.IncompleteReadError as exc:
        what = "mid-frame" if exc.partial else "between frames"
        raise TransportError(f"connection closed by peer {what}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise TransportError(f"connection failed: {exc}") from exc
    return frame_type, body


async def _read_sliced(reader: asyncio.StreamReader, size: int) -> bytes:
    """``size`` bytes read a slice at a time into one buffer of that size."""
    buf = bytearray(size)
    view = memoryview(buf)
    at = 0
    while at < size:
        piece = await reader.readexactly(min(SLICE_BYTES, size - at))
        view[at : at + len(piece)] = piece
        at += len(piece)
    view.release()
    return buf  # type: ignore[return-value]  # a bytearray serves every caller of bytes here


async def write_pieces(
    writer: asyncio.StreamWriter, pieces: list[bytes | memoryview], timeout_s: float | None = None
) -> None:
    """Write ``pieces`` (one frame) and wait for the transport to drain; a large piece goes
    a slice at a time. A small frame the socket took whole needs no drain (most frames:
    it costs a coroutine per frame). ``timeout_s``: a drain waits at most so long
    (TimeoutError), a peer that stopped reading. Socket and TLS errors are left to the
    caller to map; a connection lost under a frame the socket took shows at the next
    read or write."""
    if sum(len(p) for p in pieces) <= SLICE_BYTES:
        # one TLS record for the frame: the pieces written one by one would each be one
        writer.write(b"".join(pieces))
        if writer.transport.get_write_buffer_size():  # not all taken by the socket
            await _drain(writer, timeout_s)
        return
    for piece in pieces:
        view = memoryview(piece)
        for at in range(0, len(view), SLICE_BYTES):
            writer.write(view[at : at + SLICE_BYTES])
            await _drain(writer, timeout_s)


async def _drain(writer: asyncio.StreamWriter, timeout_s: float | None) -> None:
    if timeout_s is None:
        await writer.drain()
    else:
        async with asyncio.timeout(timeout_s):
            await writer.drain()


async def write_frame(
    writer: asyncio.StreamWriter, frame_type: int, body: bytes | memoryview
) -> None:
    """Send one frame and wait until the transport's buffer drains."""
    try:
        await write_pieces(writer, encode_frame(frame_type, body))
    except (ssl.SSLError, OSError) as exc:
        raise TransportError(f"connection failed: {exc}") from exc
