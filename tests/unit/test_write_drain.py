"""A small frame the socket takes whole is written with no wait; once the peer stops
reading, writing waits for the buffer to drain, so a stalled peer holds a bounded
amount of memory, however many frames the sender has, and a write given a timeout
gives up after it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from rt_appliance.transport.framing import write_pieces
from rt_appliance.transport.loops import new_loop

pytestmark = pytest.mark.unit


def test_writes_block_once_a_stalled_peer_fills_the_buffers() -> None:
    async def scenario() -> tuple[int, int]:
        accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

        async def never_read(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.set_result(w)

        server = await asyncio.start_server(never_read, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        frame = [b"x" * 1000]
        written = 0
        started = asyncio.get_running_loop().time()
        with contextlib.suppress(TimeoutError):  # the write's timeout ends the writing
            async with asyncio.timeout(30):  # a guard: the write's own timeout ends it
                while written < 100_000:  # 100 MB: far beyond any socket buffer
                    await write_pieces(writer, frame, timeout_s=0.5)
                    written += 1
        waited = asyncio.get_running_loop().time() - started
        assert waited < 10, "the write's own timeout should have ended it"
        buffered = writer.transport.get_write_buffer_size()
        writer.transport.abort()
        (await accepted).transport.abort()
        server.close()
        return written, buffered

    loop = new_loop()
    try:
        written, buffered = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert 0 < written < 100_000  # writing went on a while, then waited
    assert buffered <= 1 << 20  # what waits in the sender is bounded (the high-water mark)
