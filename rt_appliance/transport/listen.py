"""Accepting, dialling and tuning TCP connections that carry mutual TLS.

A server accepts plain TCP sockets itself and runs each connection's TLS handshake in
that connection's own task (``loop.connect_accepted_socket(..., ssl=...)``), so a
handshake that fails (unknown CA, expired certificate, silence) is seen, logged and
counted by the server (its ``refused`` callback) rather than lost inside a listener.
TLS starts on the bare socket: no plaintext reader exists to take a ClientHello before
the TLS layer does, on asyncio's loop or on uvloop's (which starts reading as soon as a
connection is made, whatever the protocol asked). TCP keepalive finds a peer that
vanished without a FIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable

from rt_appliance.errors import TransportError
from rt_appliance.limits import (
    ACCEPT_RETRY_S,
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    KEEPALIVE_PROBES,
    LISTEN_BACKLOG,
)

__all__ = ["Handler", "Listener", "Refused", "dial_tls", "listen_tls", "set_keepalive"]

log = logging.getLogger(__name__)

#: Serves one connection past its TLS handshake.
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: Told of a connection refused in its TLS handshake: ``refused(address, error)``.
Refused = Callable[[str, Exception], None]


class Listener:
    """Accepts connections on one socket; each one's handshake and handler run in a task
    of their own. :meth:`close` stops accepting (connections already made go on)."""

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        handshake_timeout_s: float,
        handler: Handler,
        refused: Refused,
    ) -> None:
        self._sock = sock
        self._context, self._timeout_s = context, handshake_timeout_s
        self._handler, self._refused = handler, refused
        self._connections: set[asyncio.Task[None]] = set()
        self._closed = False
        self._accepting = asyncio.create_task(self._accept(), name="accept")

    @property
    def port(self) -> int:
        """The port it listens on (the one asked for, or the one given for port 0)."""
        return int(self._sock.getsockname()[1])

    def close(self) -> None:
        self._closed = True
        self._accepting.cancel()
        self._sock.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(self._sock)
            except OSError as exc:  # out of descriptors, say: try again shortly
                if self._sock.fileno() < 0:
                    return
                log.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            task = asyncio.create_task(self._connection(conn, f"{peer[0]}:{peer[1]}"))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _connection(self, conn: socket.socket, address: str) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=self._context, ssl_handshake_timeout=self._timeout_s
            )
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            conn.close()
            self._refused(address, exc)
            return
        except BaseException:
            conn.close()
            raise
        if self._closed:  # the server stopped during the handshake
            transport.abort()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self._handler(reader, writer)


async def listen_tls(
    host: str,
    port: int,
    context: ssl.SSLContext,
    handshake_timeout_s: float,
    handler: Handler,
    refused: Refused,
) -> Listener:
    """Listen on ``host:port``; each connection that passes the TLS handshake within
    ``handshake_timeout_s`` runs ``handler``, each one that fails goes to ``refused``."""
    try:
        sock = _bind(host, port)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise TransportError(f"cannot listen on {host}:{port}: {why}") from exc
    sock.setblocking(False)
    return Listener(sock, context, handshake_timeout_s, handler, refused)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` (an IPv4 or IPv6 address, or a DNS name: its first
    address) and ``port``."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address, family=family, backlog=LISTEN_BACKLOG)


async def dial_tls(
    host: str,
    port: int,
    context: ssl.SSLContext,
    connect_within_s: float,
    handshake_within_s: float,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TLS connection to ``host:port``: TCP within ``connect_within_s``, then the
    handshake within ``handshake_within_s``, or an error. A SYN lost in a partition is
    not left to the kernel's retransmission at 1 s, 3 s, 7 s..., so the caller's next
    dial goes out soon after the path is back.

    The event loop makes, owns and closes the socket at every step, as it does for any
    connection it opens itself. A socket of ours handed to uvloop (``sock_connect``,
    ``sock=``) and closed by us after a failed or cancelled connect can close a
    descriptor libuv still has queued for epoll, and libuv aborts the process.
    """
    async with asyncio.timeout(connect_within_s):
        reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(handshake_within_s):
            # the server speaks only after the ClientHello: nothing is read before TLS
            await writer.start_tls(context, server_hostname=host)
    except BaseException:
        writer.transport.abort()
        raise
    return reader, writer


def set_keepalive(writer: asyncio.StreamWriter, unacked_s: float | None = None) -> None:
    """Turn on TCP keepalive, so a silent stream to a vanished peer fails within ~25 s.

    With ``unacked_s``, the connection also fails once bytes sent on it have gone that
    long unacknowledged (TCP_USER_TIMEOUT), instead of retransmitting at doubling
    intervals for minutes: the caller dials afresh, and is through within a round trip
    of the path coming back.
    """
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
        if unacked_s is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(unacked_s * 1000))
