"""A mutual-TLS server's connections: listening, the handshake, and each connection's task.

The push server, the pull server and the sequencer's control channel accept connections
the same way, written once here:

1. listen (:func:`~rt_appliance.transport.listen.listen_tls`): each connection's TLS
   handshake runs in its own task within a deadline; one that fails (unknown CA,
   expired certificate, silence) goes to the server's ``refused`` callback, which
   counts and logs it, and the socket is closed;
2. turn on TCP keepalive and hand the stream to the server's ``serve``;
3. keep every connection's task, so that :meth:`TlsServer.stop` ends them all.

What a connection says after TLS (HELLO, frames) is the caller's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable

from rt_appliance.transport.listen import Listener, Refused, listen_tls, set_keepalive

__all__ = ["Refused", "Serve", "TlsServer", "peer_address"]

#: Serves one connection past its TLS handshake: ``serve(reader, writer, address)``.
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[None]]


def peer_address(writer: asyncio.StreamWriter) -> str:
    """``host:port`` of the other end, for logs."""
    peer = writer.get_extra_info("peername") or ("?", 0)
    return ":".join(str(part) for part in peer[:2])


class TlsServer:
    """Listens on one address and runs ``serve`` for every connection that passes TLS."""

    def __init__(
        self,
        context: ssl.SSLContext,
        serve: Serve,
        refused: Refused,
        handshake_timeout_s: float,
    ) -> None:
        self._context = context
        self._serve = serve
        self._refused = refused
        self._handshake_timeout_s = handshake_timeout_s
        self._server: Listener | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        """Listen (raises :class:`~rt_appliance.errors.TransportError` if it cannot)."""
        self._server = await listen_tls(
            host, port, self._context, self._handshake_timeout_s, self._handle, self._refused
        )

    async def stop(self, grace_s: float) -> None:
        """Stop listening, cancel every connection and wait up to ``grace_s`` for them."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            # Ending normally when stop() cancels keeps asyncio's stream callback quiet.
            with contextlib.suppress(asyncio.CancelledError):
                await self._connection(reader, writer)
        finally:
            self._tasks.discard(task)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        set_keepalive(writer)
        await self._serve(reader, writer, peer_address(writer))
