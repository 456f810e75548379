"""Accepting and tuning TCP connections that will carry TLS.

Servers listen in plain TCP and start TLS in the connection handler
(``writer.start_tls``), so a handshake that fails (unknown CA, expired
certificate) is seen, logged and counted by the server rather than lost inside
the listener. TCP keepalive finds a peer that vanished without a FIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from functools import partial

from rt_appliance.errors import TransportError
from rt_appliance.limits import KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES

__all__ = ["Handler", "listen_before_tls", "set_keepalive"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _PausedUntilTls(asyncio.StreamReaderProtocol):
    """A stream that reads nothing until the handler starts TLS: a ClientHello read into
    the plain stream's buffer would never reach the TLS layer, and the handshake hang."""

    def __init__(self, handler: Handler) -> None:
        super().__init__(asyncio.StreamReader(), handler)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if isinstance(transport, asyncio.ReadTransport):
            transport.pause_reading()


async def listen_before_tls(host: str, port: int, handler: Handler) -> asyncio.Server:
    """Listen on ``host:port`` without TLS; each connection runs ``handler``, which starts
    TLS itself (``writer.start_tls``) and so can log and count the handshakes that fail."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.create_server(
            partial(_PausedUntilTls, handler), host, port, reuse_address=True
        )
    except OSError as exc:
        raise TransportError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def set_keepalive(writer: asyncio.StreamWriter) -> None:
    """Turn on TCP keepalive, so a silent stream to a vanished peer fails within ~25 s."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
