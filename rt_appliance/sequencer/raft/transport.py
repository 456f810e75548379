"""pysyncobj's transport over mutual TLS 1.3, run by the event loop that ticks raft.

pysyncobj's own TCP transport is plaintext. Here every node dials every other node over
TLS 1.3 with certificates required both ways (:mod:`.peer`); a peer is identified by the
name in its verified certificate (never by what it says), and only the stream's nodes
are accepted. Frames are a 4-byte length and a body, at most ``limits.MAX_RAFT_FRAME`` bytes,
decoded by :func:`.codec.restricted_loads`. No message leaves before the journal sync
that covers everything written before it has completed (:mod:`.journal`).

Each connection opens with a hello frame, ``{"type": "rt_hello", "protocol", "software"}``
(:mod:`rt_appliance.versions`); a peer whose raft protocol this release cannot speak is
refused (counted as ``version``, logged with both releases). A node of a release from
before the hello sends none: its first frame is a raft message, and it is taken as
protocol 0.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import pickle
import ssl
import struct
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from pysyncobj.node import Node
from pysyncobj.transport import Transport

from rt_appliance import trace
from rt_appliance.errors import RTError, TransportError
from rt_appliance.limits import (
    MAX_RAFT_FRAME,
    RAFT_CONNECT_TIMEOUT_S,
    RAFT_HELD_MAX,
    RAFT_LISTEN_RETRY_S,
    RAFT_LISTEN_WARN_EVERY_S,
    RAFT_SYNCS_IN_FLIGHT,
)
from rt_appliance.sequencer.raft.codec import restricted_loads
from rt_appliance.sequencer.raft.journal import SyncedJournal
from rt_appliance.sequencer.raft.link import Link
from rt_appliance.sequencer.raft.peer import Peer
from rt_appliance.transport.filesync import sync_and_close
from rt_appliance.transport.listen import Listener, listen_tls, set_keepalive
from rt_appliance.transport.tls import client_context, peer_name, server_context
from rt_appliance.versions import RAFT_FEATURES, RAFT_PROTOCOL, SOFTWARE, refusal, speaks

__all__ = ["TlsTransport"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("<I")
HELLO = "rt_hello"  # the first frame on every raft connection


class TlsTransport(Transport):  # type: ignore[misc]
    """pysyncobj transport over mutual TLS, run by the event loop that ticks raft.

    Every pysyncobj callback (a message, a peer up or down) is made on that loop's
    thread, between ticks, so raft's state is only ever touched by one thread.
    """

    def __init__(self, sync_obj: Any, self_node: Node, other_nodes: Any, *, link: Link) -> None:
        super().__init__(sync_obj, self_node, other_nodes)
        self._sync_obj = sync_obj
        self.link = link
        self.server_ctx = server_context(link.config.tls, link.name)
        self.client_ctx = client_context(link.config.tls, link.name)
        self.timeout_s = link.timeout_s
        self._peers: dict[Node, Peer] = {}
        self._server: Listener | None = None
        self.listening = asyncio.Event()  # set once the raft port accepts connections
        self._connections: set[asyncio.StreamWriter] = set()
        self._closing = False
        # messages waiting for a journal sync: (peer, frame, journal generation before it)
        self._held: collections.deque[tuple[Peer, bytes, int]] = collections.deque()

        self._syncing = 0  # journal syncs running
        self._sync_covers = 0  # the journal generation the newest running sync covers
        # sees each peer's message first; True: it was handled (pre-vote, :mod:`.prevote`)
        self.intercept: Callable[[Node, dict[str, Any]], bool] | None = None
        self.on_lost: Callable[[Node], None] | None = None  # our connection to a node ended
        self.hello = _frame(
            {
                "type": HELLO,
                "protocol": RAFT_PROTOCOL,
                "software": SOFTWARE,
                "features": list(RAFT_FEATURES),
            }
        )
        # what each peer said it runs: (raft protocol, release or None before the hello)
        self.peer_versions: dict[str, tuple[int, str | None]] = {}
        self.peer_features: dict[str, frozenset[str]] = {}  # and what else it does
        for node in other_nodes:
            self.addNode(node)

    # pysyncobj's interface. The listener is started by :meth:`listen` on the loop.
    def tryGetReady(self) -> None:
        return None

    @property
    def ready(self) -> bool:
        return True

    def waitReady(self) -> None:
        return None

    def addNode(self, node: Node) -> None:
        name = self.link.name_of(node)
        self._peers[node] = Peer(self, node, name, (node.host, node.port))

    def dropNode(self, node: Node) -> None:
        peer = self._peers.pop(node, None)
        if peer is not None:
            peer.stop()

    def send(self, node: Node, message: Any) -> bool:
        peer = self._peers.get(node)
        if peer is None or not peer.connected:
            return False
        if (
            message.get("type") == "append_entries"
            and "serialized" not in message  # snapshot chunks: each one is needed
            and "transmission" not in message  # pieces of one large entry: likewise
            and not peer.may_append()
        ):
            return True  # held back until the follower answers; raft resends from its answer
        quiet_s = self.link.quiet_answer_s
        if message.get("type") == "next_node_idx" and peer.repeats(message, quiet_s):
            return True  # the leader has this very answer already (Peer.repeats)
        # Nothing leaves before the journal is on disk (the term and the vote are already:
        # the journal saves them when pysyncobj sets them), with one exception below. The
        # kernel syncs it (transport/filesync.py), and messages wait for the sync that
        # covers what was written before them.
        journal = self.link.journal()
        if self.link.failure is not None:
            return False
        if message.get("type") == "append_entries" and journal is not None:
            message = _commit_only_synced(message, journal)
            if journal.dirty and not self._held:
                # Only a leader sends entries, and raft lets it send them before its own
                # sync, so that both syncs run at once, as long as nothing counts them
                # committed before it is on disk here too. The commit index a message
                # carries is capped at what this journal's sync covers, and the leader
                # applies an entry only once a sync covered it (RaftNode's apply).
                self._sync_soon(journal)
                return peer.send(_frame(message))
        frame = _frame(message)
        if journal is None or (not journal.dirty and not self._held):
            return peer.send(frame)
        if len(self._held) >= RAFT_HELD_MAX:
            return False  # syncs are stuck: raft's retransmission covers what is dropped
        self._held.append((peer, frame, journal.written))
        self._sync_soon(journal)
        return True

    def sync_soon(self, journal: SyncedJournal) -> bool:
        """Start a sync of the journal (:meth:`_sync_soon`); whether one runs now (its
        end kicks a tick if committed entries wait to be applied)."""
        self._sync_soon(journal)
        return self._syncing > 0

    def _sync_soon(self, journal: SyncedJournal) -> None:
        """Start a sync of the journal, unless a running one covers everything written
        or ``RAFT_SYNCS_IN_FLIGHT`` run. The kernel runs it (a worker thread where it
        does not take it: :func:`rt_appliance.transport.filesync.sync_and_close`).

        Syncs may end in any order: a later one covers all that an earlier one does (an
        fsync waits for the pages an earlier one is writing), and the journal keeps the
        furthest generation and index any of them covered."""
        if self._closing or self.link.failure is not None:
            return
        if self._syncing >= RAFT_SYNCS_IN_FLIGHT:
            return
        if self._syncing and journal.written <= self._sync_covers:
            return
        self._syncing += 1
        generation, index, cuts, fd = journal.begin_sync()
        self._sync_covers = generation
        future = sync_and_close(fd, on_thread=journal.fsync)
        future.add_done_callback(partial(self._synced, journal, generation, index, cuts))

    def _synced(
        self,
        journal: SyncedJournal,
        generation: int,
        index: int,
        cuts: int,
        future: asyncio.Future[None],
    ) -> None:
        self._syncing -= 1
        if self._closing or self.link.failure is not None:
            return  # after a failed sync no later one counts: the node stops
        exc = future.exception() if not future.cancelled() else RuntimeError("cancelled")
        if exc is not None:
            self.link.fail(exc)  # nothing held is sent: the node stops
            return
        journal.end_sync(generation, index, cuts)
        trace.event("jsynced", self.link.name, journal.synced_index)
        while self._held and self._held[0][2] <= journal.synced:
            peer, frame, _ = self._held.popleft()
            peer.send(frame)
        if self._held or journal.dirty:  # a leader's entries sent meanwhile wait for none
            self._sync_soon(journal)
        obj = self._sync_obj
        if obj._SyncObj__raftCommitIndex > obj._SyncObj__raftLastApplied:
            self.link.kick()  # committed entries waited for this sync to be applied

    def destroy(self) -> None:
        self._closing = True
        for peer in self._peers.values():
            peer.stop()
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.transport.abort()

    # on the loop
    def dial(self) -> None:
        """Start keeping a connection to every peer."""
        for peer in self._peers.values():
            peer.start()

    async def listen(self) -> None:
        """Listen for the peers, retrying while the port is taken."""
        host, port = self.link.listen
        warned = 0.0
        while self._server is None and not self._closing:
            try:
                self._server = await listen_tls(
                    host,
                    port,
                    self.server_ctx,
                    RAFT_CONNECT_TIMEOUT_S,
                    self._serve,
                    lambda where, exc: self.link.refused("handshake", f"{where}: {exc}"),
                )
            except TransportError as exc:
                if time.monotonic() >= warned:
                    log.warning("raft: %s (retrying)", exc)
                    warned = time.monotonic() + RAFT_LISTEN_WARN_EVERY_S
                await asyncio.sleep(RAFT_LISTEN_RETRY_S)
        log.info("raft: listening on %s:%d (mutual TLS)", host, port)
        self.listening.set()

    def node_up(self, node: Node) -> None:
        self._onNodeConnected(node)
        self.link.kick()

    def node_down(self, node: Node) -> None:
        if not self._closing:
            self._onNodeDisconnected(node)
            if self.on_lost is not None:
                self.on_lost(node)
            self.link.kick()

    # incoming side
    def deliver(self, node: Node, message: dict[str, Any]) -> None:
        """Hand a peer's message to raft, keeping raft's commit rule.

        Raft lets a follower commit at most up to the last entry a leader's message
        carried (or matched, for one without entries): what lies beyond it in the
        follower's log may be an old leader's uncommitted tail. pysyncobj commits up to
        the end of the log instead, which was safe only while it cut every tail; the
        journal now keeps a tail no entry contradicts (:mod:`.journal`), so the commit
        index a message brings is bounded here.

        A piece of a snapshot (``serialized``, no ``prevLogIdx``) matches no entry at all,
        so it commits nothing: pysyncobj took its commit index up to the end of the
        follower's log at every piece but the last, and applied an old leader's
        uncommitted tail before the snapshot replaced it. Found by ``rt chaos`` (seed
        149131534): a leader cut off alone kept proposing, every node then lost power,
        and its merger wrote those merges; its merged log diverged, and a subscriber
        that had read from it found a record where a range should begin."""
        snapshot = False
        if message.get("type") == "append_entries" and "prevLogIdx" in message:
            carried = message.get("entries") or ()
            last = int(message["prevLogIdx"]) + len(carried)
            if message.get("transmission") == "finish":
                last = int(message["prevLogIdx"]) + 1  # the pieces make one entry
            if isinstance(message.get("commit_index"), int) and message["commit_index"] > last:
                message = {**message, "commit_index": last}
        elif message.get("type") == "append_entries" and "serialized" in message:
            message, snapshot = {**message, "commit_index": 0}, True
        if self.intercept is not None and self.intercept(node, message):
            return
        self._onMessageReceived(node, message)
        if snapshot:
            self._commit_snapshot()

    def _commit_snapshot(self) -> None:
        """Once a snapshot from the leader is in place, what it holds is committed: the
        commit index moves up to it (the next append moves it on from there)."""
        obj = self._sync_obj
        applied = int(obj._SyncObj__raftLastApplied)
        if applied > int(obj._SyncObj__raftCommitIndex):
            obj._SyncObj__raftCommitIndex = applied
            obj._SyncObj__raftLog.setRaftCommitIndex(applied)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        self._connections.add(writer)
        try:
            set_keepalive(writer, self.link.unacked_s)
            try:
                name = peer_name(writer.get_extra_info("ssl_object"))
            except RTError as exc:
                self.link.refused("identity", f"{peer[0]}: {exc}")
                return
            node = self.link.node_named(name)
            if node is None:
                self.link.refused("identity", f"{peer[0]} presented {name!r}, not a peer node")
                return
            ours = self._peers.get(node)
            if ours is not None:  # it is up: our own connection to it need not wait out
                ours.redial_now()  # a backoff (its heartbeats would come late)
            try:
                await self._read_frames(reader, node, name)
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
                log.info("raft: connection from %s closed: %s", name, exc or "end of stream")
        except asyncio.CancelledError:  # the node is stopping: end quietly
            return
        finally:
            self._connections.discard(writer)
            writer.transport.abort()

    async def _read_frames(self, reader: asyncio.StreamReader, node: Node, name: str) -> None:
        first = True
        while not self._closing:
            (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            if size > MAX_RAFT_FRAME:
                self.link.refused("frame", f"{name}: frame of {size} bytes")
                return
            body = await reader.readexactly(size)
            try:
                message = restricted_loads(body)
            except Exception as exc:  # any decoding failure: the frame is garbage
                self.link.refused("frame", f"{name}: undecodable frame: {exc}")
                return
            if not isinstance(message, dict):
                self.link.refused("frame", f"{name}: frame is not a raft message")
                return
            if first:
                first = False
                if not self._versions_agree(name, message):
                    return
                if message.get("type") == HELLO:
                    continue
            peer = self._peers.get(node)
            if peer is not None and message.get("type") == "next_node_idx":
                peer.answered(bool(message.get("success")))
            if trace.enabled():
                _trace_round(self.link.name, name, message)
            try:
                self.deliver(node, message)
            except Exception as exc:  # well-formed pickle, but not a message raft can take
                log.exception("raft: a message from %s could not be handled", name)
                self.link.refused("frame", f"{name}: unhandled message: {exc!r}")
                return
            self.link.kick()

    def _versions_agree(self, name: str, first: dict[str, Any]) -> bool:
        """Whether the peer's first frame (its hello, or a raft message from a release
        before it) names a raft protocol this release speaks; refuse it if not."""
        features: object = []
        if first.get("type") == HELLO:
            protocol, software = first.get("protocol"), first.get("software")
            features = first.get("features", [])
        else:
            protocol, software = 0, None
        if not speaks("raft", protocol) or not isinstance(protocol, int):
            self.link.refused("version", refusal("raft", name, protocol, software))
            return False
        seen = (protocol, str(software) if software is not None else None)
        if self.peer_versions.get(name) != seen:
            log.info(
                "raft: %s runs %s (raft protocol %d)",
                name,
                f"release {seen[1]}" if seen[1] else "a release before versions",
                seen[0],
            )
        self.peer_versions[name] = seen
        said = features if isinstance(features, list) else []
        self.peer_features[name] = frozenset(f for f in said if isinstance(f, str))
        return True


def _trace_round(own: str, sender: str, message: dict[str, Any]) -> None:
    """Raft's round, as traced (:mod:`rt_appliance.trace`): the entries a follower
    received, and each follower's answer as it reached the leader."""
    kind = message.get("type")
    if kind == "append_entries" and message.get("entries") and "prevLogIdx" in message:
        trace.event("entries", own, int(message["prevLogIdx"]) + len(message["entries"]))
    elif kind == "next_node_idx" and message.get("success") is True:
        trace.event("answer", sender, int(message["next_node_idx"]) - 1)


def _frame(message: dict[str, Any]) -> bytes:
    body = pickle.dumps(message, protocol=4)
    return _LENGTH.pack(len(body)) + body


def _commit_only_synced(message: dict[str, Any], journal: SyncedJournal) -> dict[str, Any]:
    """``message`` with a commit index no higher than what this journal's syncs cover.

    pysyncobj's leader counts itself toward a commit as soon as an entry is in its
    journal; a follower told so could apply an entry that only it and one unsynced
    leader hold, which a power loss of the leader would take from the majority."""
    commit = message.get("commit_index")
    # not dirty: a completed sync covered every change (its index may lag after a cut)
    if journal.dirty and isinstance(commit, int) and commit > journal.synced_index:
        return {**message, "commit_index": journal.synced_index}
    return message
