"""Partitions without namespaces: every link between hosts through a TCP relay that can
stop carrying it.

Where neither root nor a user namespace can be had, hosts cannot be put in network
namespaces of their own. The hosts then reach each other through relays on further
loopback addresses, each host reading a configuration of its own (a *view*) that names
them:

* a **pair relay** for every ordered pair of nodes (``127.77.<i>.<j>``: how node ``i``
  reaches node ``j``): raft, the leader's reports, fetching from a peer;
* a **client relay** per node (``127.78.0.<j>``): how publishers and subscribers reach
  node ``j``, and what every node tells them (its ``advertised_host``).

A relay listens on every port of the stream and forwards to the node's real address.
Blocking ``a`` → ``b`` stops carrying bytes from ``a`` to ``b``: on the connections
already open they wait in the relay, as TCP keeps unacknowledged bytes and sends them
again once the path is back, and a new connection is not put through until both
directions are open again, as a SYN or its answer would be lost. Cutting a node stops
its pair relays and its client relay both ways.

What this does not do: a relay is one more process hop (a little latency), and a block
delays bytes rather than losing them, so a connection never breaks by itself in a
partition; the daemons' own timeouts (raft's election timeout, keepalives, report and
fetch deadlines) are what notice, as they would with a real partition shorter than
TCP's retry time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from rt_appliance.config import StreamConfig
from rt_lab.chaos.partitions import Partitions

__all__ = ["RelayNetwork", "probe_relays"]

log = logging.getLogger(__name__)

_CHUNK = 256 << 10
_CLIENTS = "clients"  # the side of a client relay that is not a node


def pair_address(i: int, j: int) -> str:
    """Where node ``i`` (counted from 1) reaches node ``j``."""
    return f"127.77.{i}.{j}"


def client_address(j: int) -> str:
    """Where publishers and subscribers reach node ``j``."""
    return f"127.78.0.{j}"


def probe_relays() -> str | None:
    """Why relays cannot listen here, or None if they can."""
    try:
        with socket.socket() as s:
            s.bind((pair_address(1, 2), 0))
    except OSError as exc:
        return f"cannot bind loopback relay addresses (127.77.0.0/16): {exc}"
    return None


class RelayNetwork(Partitions):
    """The relays of a stream's nodes; the same interface as the namespace network
    (``block``, ``split``, ``cut``, ``heal``, ``close``), plus :meth:`view`."""

    def __init__(self, config: StreamConfig) -> None:
        self.names = [n.name for n in config.nodes]
        self._real = {n.name: n.host for n in config.nodes}
        self._index = {name: i for i, name in enumerate(self.names, start=1)}
        self._ports = sorted(
            {config.ports.push, config.ports.pull, config.ports.raft, config.ports.control}
        )
        self._open: dict[tuple[str, str], asyncio.Event] = {}
        self._held: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="relays", daemon=True)
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self.close()
            raise

    # -- what each host reads ------------------------------------------------------------

    def view(self, host: str) -> list[dict[str, Any]]:
        """The ``nodes`` list of host ``host``'s configuration: its own address if it is
        a node, a relay for every other node."""
        nodes = []
        for name in self.names:
            j = self._index[name]
            entry: dict[str, Any] = {"name": name, "advertised_host": client_address(j)}
            if name == host:
                entry["host"] = self._real[name]
            elif host in self._index:
                entry["host"] = pair_address(self._index[host], j)
            else:
                entry["host"] = client_address(j)
            nodes.append(entry)
        return nodes

    # -- faults --------------------------------------------------------------------------

    def block(self, src: str, dst: str) -> None:
        """Stop carrying what ``src`` sends to ``dst`` (one way), from when this returns."""
        self._on_loop(self._open[(src, dst)].clear)

    def cut(self, name: str) -> None:
        """Unplug node ``name`` from every other node and from every client."""
        for other in [*self.names, _CLIENTS]:
            if other != name:
                self.block(name, other)
                self.block(other, name)

    def heal(self) -> None:
        def reopen() -> None:
            for event in self._open.values():
                event.set()

        self._on_loop(reopen)

    def close(self) -> None:
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                self._call(self._stop(), timeout_s=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()

    # -- the relays ----------------------------------------------------------------------

    def _call(self, coro: Any, timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the relays' loop and wait for it: a block is in force on return."""

        async def run() -> None:
            fn()

        self._call(run())

    async def _start(self) -> None:
        sides = [*self.names, _CLIENTS]
        for a in sides:
            for b in sides:
                if a != b:
                    self._open[(a, b)] = asyncio.Event()
                    self._open[(a, b)].set()
        for dst in self.names:
            j = self._index[dst]
            listeners = [(client_address(j), _CLIENTS)] + [
                (pair_address(self._index[src], j), src) for src in self.names if src != dst
            ]
            for address, src in listeners:
                for port in self._ports:
                    server = await asyncio.start_server(
                        functools.partial(self._carry, src=src, dst=dst, port=port),
                        address,
                        port,
                        reuse_address=True,
                    )
                    self._servers.append(server)

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._held):
            writer.transport.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await server.wait_closed()

    async def _both_open(self, src: str, dst: str) -> None:
        while not (self._open[(src, dst)].is_set() and self._open[(dst, src)].is_set()):
            await self._open[(src, dst)].wait()
            await self._open[(dst, src)].wait()

    async def _carry(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        src: str,
        dst: str,
        port: int,
    ) -> None:
        """One connection from ``src`` to node ``dst``: put through once both ways are
        open, then each direction carried while it is open."""
        self._held.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._both_open(src, dst)
            try:
                up_reader, up_writer = await asyncio.open_connection(self._real[dst], port)
            except OSError:
                return  # nothing listens there now: the client sees the connection end
            self._held.add(up_writer)
            await asyncio.gather(
                self._pump(reader, up_writer, self._open[(src, dst)]),
                self._pump(up_reader, writer, self._open[(dst, src)]),
            )
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.debug("relay %s -> %s:%d: connection ended: %s", src, dst, port, exc)
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    self._held.discard(w)
                    w.transport.abort()

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event
    ) -> None:
        try:
            while data := await reader.read(_CHUNK):
                await gate.wait()
                writer.write(data)
                await writer.drain()
        except OSError as exc:  # either side reset: the other end sees the connection end
            log.debug("relay: a connection ended: %s", exc)
        finally:
            writer.transport.abort()
