"""One outgoing raft connection: kept up, identity-checked, flow-controlled.

Each direction of a pair of nodes has its own connection (A's messages to B travel on
the connection A opened); nothing comes back on it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any

from pysyncobj.node import Node

from rt_appliance.errors import PeerRejectedError, RTError
from rt_appliance.limits import (
    RAFT_ANSWER_WAIT_S,
    RAFT_CONNECT_TIMEOUT_S,
    RAFT_DIAL_BACKOFF_FIRST_S,
    RAFT_DIAL_BACKOFF_MAX_S,
    RAFT_SEND_BUFFER_BYTES,
)
from rt_appliance.transport.listen import dial_tls, set_keepalive
from rt_appliance.transport.tls import peer_name

if TYPE_CHECKING:
    from rt_appliance.sequencer.raft.transport import TlsTransport

__all__ = ["Peer"]

log = logging.getLogger(__name__)


class Peer:
    """Our outgoing connection to one node, kept up by a task on the event loop."""

    def __init__(self, transport: TlsTransport, node: Node, name: str, address: tuple[str, int]):
        self.transport, self.node, self.name, self.address = transport, node, name, address
        self.writer: asyncio.StreamWriter | None = None
        self.stopping = False
        self.in_step = False  # the follower accepted our last append
        self.awaiting = False  # an append is out and its answer not back
        self.awaiting_until = 0.0
        self.full_since: float | None = None  # when the send buffer last went over its limit
        # a follower's last answer to an append on this connection, and when it left
        self.last_answer: tuple[object, ...] | None = None
        self.last_answer_at = 0.0
        self.task: asyncio.Task[None] | None = None
        self._redial = asyncio.Event()  # the peer is up: dial now, not after the backoff

    def redial_now(self) -> None:
        """The peer connected to us: if we are waiting to dial it again, dial now."""
        if self.writer is None:
            self._redial.set()

    @property
    def connected(self) -> bool:
        return self.writer is not None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-to-{self.name}")

    async def _run(self) -> None:
        backoff = RAFT_DIAL_BACKOFF_FIRST_S
        while not self.stopping:
            dialled = time.monotonic()
            try:
                reader, writer = await self._connect()
            except Exception as exc:  # whatever failed, the peer is dialled again
                if isinstance(exc, OSError | ssl.SSLError | TimeoutError | RTError):
                    log.debug("raft: cannot reach %s at %s:%d: %s", self.name, *self.address, exc)
                else:
                    log.exception("raft: dialling %s failed unexpectedly", self.name)
                self._redial.clear()
                try:
                    # dials start at most every backoff seconds: one that timed out
                    # (a partition) has waited already, one refused at once waits here
                    async with asyncio.timeout(backoff - (time.monotonic() - dialled)):
                        await self._redial.wait()
                    backoff = RAFT_DIAL_BACKOFF_FIRST_S
                except TimeoutError:
                    backoff = min(backoff * 2, RAFT_DIAL_BACKOFF_MAX_S)
                continue
            backoff = RAFT_DIAL_BACKOFF_FIRST_S
            self.in_step = self.awaiting = False
            self.full_since, self.last_answer = None, None
            self.writer = writer
            self.transport.node_up(self.node)
            log.info("raft: connected to %s at %s:%d", self.name, *self.address)
            try:
                # Nothing comes back on this connection (answers travel on the one the
                # peer opened): a read ends only when the connection does.
                await reader.read(1)
                log.info("raft: connection to %s closed by the peer", self.name)
            except (OSError, ssl.SSLError) as exc:
                log.info("raft: connection to %s lost: %s", self.name, exc)
            finally:
                self.writer = None
                writer.transport.abort()
                self.transport.node_down(self.node)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        unacked_s = self.transport.link.unacked_s
        reader, writer = await dial_tls(
            *self.address, self.transport.client_ctx, unacked_s, RAFT_CONNECT_TIMEOUT_S
        )
        try:
            set_keepalive(writer, unacked_s)
            name = peer_name(writer.get_extra_info("ssl_object"))
            if name != self.name:
                raise PeerRejectedError(
                    f"{self.address} presented {name!r}, expected {self.name!r}"
                )
            writer.write(self.transport.hello)  # before any raft message on it
        except BaseException:
            writer.transport.abort()
            raise
        return reader, writer

    # Flow control for a follower that is not in step. pysyncobj's leader sends its whole
    # backlog at once, moving its next index past the end; a follower whose log diverges
    # (an old leader's uncommitted tail) rejects the first batch (its answer moves the index
    # back one) and every later one (each answer moves it to the follower's end): the two
    # kinds of answer alternate forever. So until a follower accepts, one append is in
    # flight at a time, and each answer steps the index back one entry.
    def may_append(self) -> bool:
        if self.in_step:
            return True
        if self.awaiting and time.monotonic() < self.awaiting_until:
            return False
        self.awaiting, self.awaiting_until = True, time.monotonic() + RAFT_ANSWER_WAIT_S
        return True

    def answered(self, success: bool) -> None:
        self.in_step, self.awaiting = success, False

    def repeats(self, answer: dict[str, Any], within_s: float) -> bool:
        """Whether ``answer`` (a follower's ``next_node_idx``) says only what its last
        success on this connection said, less than ``within_s`` ago: the leader knows it.

        pysyncobj's follower answers every append, and both a leader's commit news and
        its heartbeat are appends with no entries: the answer to each repeats the last
        one (a send and a wake on both sides per message, for nothing). ``within_s`` is
        :attr:`Link.quiet_answer_s`: an idle follower answers every few heartbeats, so
        the leader still hears from it several times within its fallback timeout. An
        answer that says anything new (an index, a failure, another term) goes at once."""
        said = (
            answer.get("next_node_idx"),
            answer.get("reset"),
            answer.get("success"),
            answer.get("term"),
        )
        now = time.monotonic()
        if said == self.last_answer and said[2] is True and now - self.last_answer_at < within_s:
            return True
        self.last_answer, self.last_answer_at = said, now
        return False

    def send(self, frame: bytes) -> bool:
        """Queue ``frame`` (never blocks); False when it cannot be sent now."""
        writer = self.writer
        if writer is None or writer.transport.is_closing():
            return False
        if writer.transport.get_write_buffer_size() >= RAFT_SEND_BUFFER_BYTES:
            # The peer is not reading. Raft's retransmission covers what is dropped here;
            # a peer that stays stuck is cut off, and the next connection starts afresh.
            now = time.monotonic()
            if self.full_since is None:
                self.full_since = now
            elif now - self.full_since > self.transport.timeout_s:
                log.warning(
                    "raft: %s has not read for %.0f s; reconnecting",
                    self.name,
                    now - self.full_since,
                )
                writer.transport.abort()
            return False
        self.full_since = None
        writer.write(frame)
        return True

    def stop(self) -> None:
        self.stopping = True
        if self.writer is not None:
            self.writer.transport.abort()
        if self.task is not None:
            self.task.cancel()
