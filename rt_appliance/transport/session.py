"""Connections of the stream's protocol: TLS, the HELLO/WELCOME handshake, framed messages.

Every channel between the hosts of a stream speaks it: push and pull replication,
node-to-node fetches, the sequencer's control channel and ``rt status``. It lives in
``transport`` (below ``replicate`` and ``sequencer``) so that each uses it as an equal.

The client opens the connection and says who it is
(``HELLO``); the server checks that the name in the client's verified
certificate is the host the HELLO names, that the configuration gives that host
the expected role, and that the stream matches, then answers ``WELCOME`` with
its node name. The client checks that the server's certificate names a node of
the stream (and, when it dialled a node directly, that node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rt_appliance.config.model import HostRole, StreamConfig
from rt_appliance.errors import FrameError, PeerRejectedError, RTError, TransportError
from rt_appliance.limits import (
    CLOSE_WAIT_S,
    CONNECT_TIMEOUT_S,
    ERROR_SEND_WAIT_S,
    HANDSHAKE_TIMEOUT_S,
)
from rt_appliance.transport.framing import FRAME_HEADER, encode_frame, read_frame, write_pieces
from rt_appliance.transport.messages import (
    FrameType,
    decode_control,
    encode_control,
    encode_data,
    require,
)
from rt_appliance.transport.tls import peer_name
from rt_appliance.versions import SOFTWARE, WIRE_PROTOCOL, refusal, speaks

__all__ = [
    "Connection",
    "accept",
    "connect",
    "finish_in_thread",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class Connection:
    """One framed, mutually authenticated connection; ``peer`` is the other host's name."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer: str
    max_frame_bytes: int

    async def send(self, frame_type: FrameType, fields: dict[str, Any]) -> None:
        await self._write(encode_frame(frame_type, encode_control(fields)))

    async def send_data(
        self, dir: str, position: int, payload: bytes | memoryview, timeout_s: float | None = None
    ) -> None:
        """Send one DATA frame; ``timeout_s``: waiting for a peer that stopped reading
        raises TimeoutError after so long."""
        head, body = encode_data(dir, position, payload)
        frame_header = FRAME_HEADER.pack(len(head) + len(body) + 1, FrameType.DATA)
        await self._write([frame_header, head, body], timeout_s)

    async def _write(
        self, pieces: list[bytes | memoryview], timeout_s: float | None = None
    ) -> None:
        try:
            await write_pieces(self.writer, pieces, timeout_s)
        except (ssl.SSLError, OSError) as exc:
            raise TransportError(f"connection to {self.peer} failed: {exc}") from exc

    async def receive(self) -> tuple[int, bytes]:
        return await read_frame(self.reader, self.max_frame_bytes)

    async def receive_control(self, expected: FrameType) -> dict[str, Any]:
        frame_type, body = await self.receive()
        fields = decode_control(frame_type, body)
        if frame_type == FrameType.ERROR:
            raise PeerRejectedError(f"{self.peer} refused: {fields.get('message', '?')}")
        if frame_type != expected:
            raise FrameError(
                f"expected {expected.name} from {self.peer}, got frame type {frame_type}"
            )
        return fields

    async def error(self, message: str, retryable: bool) -> None:
        """Tell the peer why the connection ends (best effort)."""
        with contextlib.suppress(RTError, TimeoutError):
            async with asyncio.timeout(ERROR_SEND_WAIT_S):
                await self.send(FrameType.ERROR, {"message": message, "retryable": retryable})

    def abort(self) -> None:
        """Drop the connection now (a pending receive fails); no goodbye is sent."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self.writer.wait_closed()


async def accept(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    config: StreamConfig,
    local_name: str,
    roles: set[HostRole],
) -> tuple[Connection, dict[str, Any]]:
    """Server side of the handshake; returns the connection and the client's HELLO."""
    name = peer_name(writer.get_extra_info("ssl_object"))
    conn = Connection(reader, writer, name, config.replication.max_frame_bytes)
    async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
        hello = await conn.receive_control(FrameType.HELLO)
    claimed = require(hello, "host", str)
    role = config.role_of(name)
    problem = None
    if claimed != name:
        problem = f"certificate names {name!r} but HELLO claims {claimed!r}"
    elif role not in roles:
        problem = (
            f"host {name!r} is a {role or 'unknown host'} here, not a {'/'.join(sorted(roles))}"
        )
    elif hello.get("stream") != config.stream:
        problem = f"wrong stream {hello.get('stream')!r}, this is {config.stream!r}"
    elif not speaks("wire", hello.get("version")):
        problem = refusal("wire", name, hello.get("version"), hello.get("software"))
    if problem:
        await conn.error(problem, retryable=False)
        raise PeerRejectedError(problem)
    welcome = {
        "node": local_name,
        "stream": config.stream,
        "version": WIRE_PROTOCOL,
        "software": SOFTWARE,
    }
    await conn.send(FrameType.WELCOME, welcome)
    return conn, hello


async def connect(
    host: str,
    port: int,
    context: ssl.SSLContext,
    config: StreamConfig,
    local_name: str,
    role: str,
    expect_node: str | None,
) -> tuple[Connection, str]:
    """Client side: connect, handshake; returns the connection and the node that answered."""
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=None
            )
    except (OSError, ssl.SSLError, TimeoutError) as exc:
        raise TransportError(f"cannot connect to {host}:{port}: {exc}") from exc
    name = peer_name(writer.get_extra_info("ssl_object"))
    conn = Connection(reader, writer, name, config.replication.max_frame_bytes)
    try:
        if config.role_of(name) is not HostRole.NODE or (expect_node and name != expect_node):
            raise PeerRejectedError(
                f"{host}:{port} presented {name!r}, not node {expect_node or '(any)'}"
            )
        hello = {
            "role": role,
            "host": local_name,
            "stream": config.stream,
            "version": WIRE_PROTOCOL,
            "software": SOFTWARE,
        }
        await conn.send(FrameType.HELLO, hello)
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
            welcome = await conn.receive_control(FrameType.WELCOME)
        if require(welcome, "node", str) != name:
            raise PeerRejectedError(f"{name} welcomed as {welcome['node']!r}")
        # a node of a release before versions sends none: it speaks protocol 1
        if not speaks("wire", welcome.get("version", 1)):
            problem = refusal("wire", name, welcome.get("version"), welcome.get("software"))
            raise PeerRejectedError(problem)
    except BaseException:
        await conn.close()
        raise
    return conn, name


async def finish_in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread. If the caller is cancelled meanwhile, wait for the
    call to finish before re-raising, so nothing is closed under a running read or write."""
    task = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: the caller is gone, its cancellation wins
        raise
