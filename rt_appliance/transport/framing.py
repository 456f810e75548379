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
"""

from __future__ import annotations

import asyncio
import ssl
import struct

from rt_appliance.errors import FrameError, TransportError

__all__ = ["FRAME_HEADER", "encode_frame", "read_frame", "write_frame"]

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
        body = await reader.readexactly(length - 1)
    except asyncio.IncompleteReadError as exc:
        what = "mid-frame" if exc.partial else "between frames"
        raise TransportError(f"connection closed by peer {what}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise TransportError(f"connection failed: {exc}") from exc
    return frame_type, body


async def write_frame(
    writer: asyncio.StreamWriter, frame_type: int, body: bytes | memoryview
) -> None:
    """Send one frame and wait until the transport's buffer drains."""
    try:
        writer.writelines(encode_frame(frame_type, body))
        await writer.drain()
    except (ssl.SSLError, OSError) as exc:
        raise TransportError(f"connection failed: {exc}") from exc
