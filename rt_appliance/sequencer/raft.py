"""Raft for the sequencer: pysyncobj, over mutual TLS, with a synced journal.

This is the only module that imports pysyncobj. What it changes about pysyncobj's
defaults, and why:

* **Transport.** pysyncobj's own TCP transport is plaintext. :class:`TlsTransport`
  replaces it: every node dials every other node over TLS 1.3 with certificates
  required both ways; the peer is identified by the name in its verified certificate
  (never by what it says), and only the stream's nodes are accepted. Each direction
  of a pair has its own connection (A's messages to B travel on the connection A
  opened). Frames are a 4-byte length and a body, at most ``MAX_RAFT_FRAME`` bytes.
* **No unpickling of untrusted bytes.** Bytes are decoded only after the TLS
  handshake proved the sender is a node of this stream, and even then by an
  unpickler that refuses every global (no class, no function can be named), so a
  frame can only ever build dicts, lists, tuples, strings, bytes and numbers.
  pysyncobj's own ``pysyncobj.pickle.loads``/``load`` (used for the commands in its
  log) are replaced by the same restricted decoder. Snapshots are JSON.
* **A synced journal.** pysyncobj writes its journal through mmap and never syncs
  it. Here the journal counts its changes, and no raft message leaves the node before
  a sync (fsync, which on Linux also writes back pages changed through the mapping)
  that began after everything written before the message has completed, so no vote
  and no append acknowledgement is sent for an entry that is not on disk. Syncs run in
  a worker thread, one at a time, each covering every change made before it began;
  messages wait in order meanwhile, and raft's loop goes on (a sync can take a
  hundred milliseconds when the disk is busy, and would otherwise delay heartbeats
  into elections). A committed entry is applied only once a sync has covered it.
* **Replicated methods never raise.** :meth:`_Replicated.apply` hands the command
  bytes to the state machine and logs and counts anything it raises; a malformed
  command is rejected by the state machine identically on every node.
* **Every ``SyncObjConf`` option is set explicitly** in :func:`_conf`.
* **One thread, no polling.** pysyncobj's own tick thread is off (``autoTick=False``):
  :meth:`RaftNode.run` ticks raft on the sequencer's event loop, at once when a
  message arrives, a proposal is made or a peer comes or goes, and otherwise when
  raft's next timer is due (the leader's next heartbeat, a follower's election
  deadline; at least every ``_TICK_S``). An idle node ticks about as often as the
  heartbeats go, not a hundred times a second. The TLS links are asyncio streams on
  the same loop, so a message costs no hand-over between threads.
* **Term and vote on disk.** pysyncobj keeps them in memory only; the transport
  saves them (:mod:`rt_appliance.sequencer.vote`) before any message leaves the node
  whenever either changed, and restores them when the node starts, so a restarted
  node never votes twice in one term and its term never goes back.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import io
import json
import logging
import os
import pickle
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import pysyncobj.journal as _journal
import pysyncobj.pickle as _pso_pickle
import pysyncobj.syncobj as _syncobj
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.node import Node, TCPNode
from pysyncobj.transport import Transport

from rt_appliance import trace
from rt_appliance.config.model import HostRole, NodeConfig, StreamConfig
from rt_appliance.errors import PeerRejectedError, RTError, TransportError
from rt_appliance.limits import KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES
from rt_appliance.sequencer.vote import Vote, VoteStore
from rt_appliance.transport.listen import listen_before_tls, set_keepalive
from rt_appliance.transport.tls import client_context, peer_name, server_context

__all__ = ["RaftNode", "RaftStatus", "StateMachine", "restricted_loads"]

log = logging.getLogger(__name__)

MAX_RAFT_FRAME = 64 << 20
_LENGTH = struct.Struct("<I")
_SEND_BUFFER_BYTES = 64 << 20  # unsent to one peer; beyond, raft's retransmission covers
_CONNECT_TIMEOUT_S = 3.0
_ANSWER_WAIT_S = 0.1  # unanswered this long: send the next append anyway
_TICK_S = 0.1  # raft's timers are checked at least this often (pysyncobj's autoTickPeriod)
_TIMER_SLACK_S = 0.001  # a timer tick comes this long after the deadline it serves
_HELD_MAX = 10_000  # messages waiting for a journal sync; beyond, they are dropped


# -- decoding: no globals, ever -------------------------------------------------------


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")


def restricted_loads(data: bytes | str) -> Any:
    """Unpickle plain data only: containers, strings, bytes, numbers, None, booleans."""
    if isinstance(data, str):
        data = data.encode()
    return _NoGlobals(io.BytesIO(data)).load()


def _restricted_load(file: Any) -> Any:
    return _NoGlobals(file).load()


_UNDECODABLE: list[Any] = [None]  # the command an undecodable log entry is applied as


def _command_loads(data: bytes | str) -> Any:
    """pysyncobj's decoder for its log entries: restricted, and never stalling the log.

    An entry that does not decode is applied as our ``apply`` with empty bytes, which
    the state machine rejects on every node alike, instead of raising inside
    pysyncobj (which would retry the same entry forever).
    """
    try:
        return restricted_loads(data)
    except Exception as exc:
        if _UNDECODABLE[0] is None:
            raise
        log.error("raft: a log entry does not decode (%s); applied as a rejected command", exc)
        return _UNDECODABLE[0]


def _dumps(obj: Any, protocol: int | None = None) -> bytes:
    return pickle.dumps(obj, protocol=4)  # bytes as bytes: no codecs global to allow


def _dump(obj: Any, file: Any, protocol: int | None = None) -> None:
    pickle.dump(obj, file, protocol=4)


_journal.loads = restricted_loads  # the journal's meta file (imported by name there)
_journal.dumps = _dumps
_pso_pickle.loads = _command_loads
_pso_pickle.load = _restricted_load
_pso_pickle.dumps = _dumps
_pso_pickle.dump = _dump


# -- the journal, synced before anything depends on it ------------------------------


class _SyncedJournal(_journal.FileJournal):  # type: ignore[misc]
    """pysyncobj's file journal that knows what is on disk.

    Every change bumps :attr:`written`; a sync taken at generation G covers every change
    up to G (:attr:`synced`) and every entry up to the raft index that was last then
    (:attr:`synced_index`). A sync can run in a worker thread (:meth:`begin_sync`,
    :func:`_fsync_and_close`, :meth:`end_sync`) while raft goes on writing.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.written = 1  # generation of the last change (the file as opened counts)
        self.synced = 0  # generation the last completed sync covered
        self.synced_index = 0  # raft entries up to this index are on disk
        self.cuts = 0  # entries removed (a divergent tail, a compaction) so far
        self.syncs = 0
        super().__init__(path)

    @property
    def dirty(self) -> bool:
        return self.synced < self.written

    def last_index(self) -> int:
        return int(self[-1][1]) if len(self) else 0

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self.written += 1

    def clear(self) -> None:
        super().clear()
        self.written += 1
        self.cuts += 1
        self.synced_index = 0  # what is added back is not on disk until the next sync

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        super().deleteEntriesFrom(entryFrom)
        self.written += 1
        self.cuts += 1
        self.synced_index = min(self.synced_index, self.last_index())

    def begin_sync(self) -> tuple[int, int, int, int]:
        """(generation, last index, cuts, a descriptor of the file to fsync and close).

        The descriptor is a duplicate: pysyncobj reopens the file when it grows it."""
        resizable = self._FileJournal__journalFile
        fd = os.dup(resizable._ResizableFile__f.fileno())
        return self.written, self.last_index(), self.cuts, fd

    def end_sync(self, generation: int, index: int, cuts: int) -> None:
        self.synced = max(self.synced, generation)
        if cuts == self.cuts:  # nothing removed meanwhile: the entries synced are still ours
            self.synced_index = max(self.synced_index, index)
        self.syncs += 1

    def sync(self) -> None:
        """Sync now, in this thread (if anything changed)."""
        if self.dirty:
            generation, index, cuts, fd = self.begin_sync()
            _fsync_and_close(fd)
            self.end_sync(generation, index, cuts)


def _fsync_and_close(fd: int) -> None:
    # fsync alone: on Linux it also writes back pages dirtied through the shared mapping
    # (msync(MS_SYNC) comes down to the same), so one call does both.
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_JOURNALS: dict[str, _SyncedJournal] = {}


def _create_journal(journal_file: str | None = None) -> Any:
    if journal_file is None:
        raise RuntimeError("the sequencer always keeps a journal file")
    journal = _SyncedJournal(journal_file)
    _JOURNALS[journal_file] = journal
    return journal


_syncobj.createJournal = _create_journal


# -- the state machine interface ----------------------------------------------------


class StateMachine(Protocol):
    """What raft drives: deterministic apply, and a JSON snapshot of the state."""

    def apply(self, command: bytes) -> bool: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, snapshot: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str  # leader | follower | candidate
    leader: str | None
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    log_entries: int
    connected: list[str]
    peers: dict[str, dict[str, int | None]]  # leader only: next and match index per follower


# -- the transport --------------------------------------------------------------------


class _Peer:
    """Our outgoing connection to one node, kept up by a task on the event loop."""

    def __init__(self, transport: TlsTransport, node: Node, name: str, address: tuple[str, int]):
        self.transport, self.node, self.name, self.address = transport, node, name, address
        self.writer: asyncio.StreamWriter | None = None
        self.stopping = False
        self.in_step = False  # the follower accepted our last append
        self.awaiting = False  # an append is out and its answer not back
        self.awaiting_until = 0.0
        self.full_since: float | None = None  # when the send buffer last went over its limit
        self.task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self.writer is not None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-to-{self.name}")

    async def _run(self) -> None:
        backoff = 0.05
        while not self.stopping:
            try:
                reader, writer = await self._connect()
            except (OSError, ssl.SSLError, TimeoutError, RTError) as exc:
                log.debug("raft: cannot reach %s at %s:%d: %s", self.name, *self.address, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.05
            self.in_step = self.awaiting = False
            self.full_since = None
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
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                *self.address, ssl=self.transport.client_ctx, server_hostname=None
            ),
            _CONNECT_TIMEOUT_S,
        )
        try:
            set_keepalive(writer)
            name = peer_name(writer.get_extra_info("ssl_object"))
            if name != self.name:
                raise PeerRejectedError(
                    f"{self.address} presented {name!r}, expected {self.name!r}"
                )
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
        self.awaiting, self.awaiting_until = True, time.monotonic() + _ANSWER_WAIT_S
        return True

    def answered(self, success: bool) -> None:
        self.in_step, self.awaiting = success, False

    def send(self, frame: bytes) -> bool:
        """Queue ``frame`` (never blocks); False when it cannot be sent now."""
        writer = self.writer
        if writer is None or writer.transport.is_closing():
            return False
        if writer.transport.get_write_buffer_size() >= _SEND_BUFFER_BYTES:
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


class TlsTransport(Transport):  # type: ignore[misc]
    """pysyncobj transport over mutual TLS, run by the event loop that ticks raft.

    Every pysyncobj callback (a message, a peer up or down) is made on that loop's
    thread, between ticks, so raft's state is only ever touched by one thread.
    """

    def __init__(self, sync_obj: Any, self_node: Node, other_nodes: Any, *, link: _Link) -> None:
        super().__init__(sync_obj, self_node, other_nodes)
        self.link = link
        # pysyncobj keeps term and vote in memory only: restore them before the first tick
        # (it creates the transport after setting both to their initial values).
        self._sync_obj = sync_obj
        self._votes = VoteStore(Path(link.journal_path).parent)
        restored = self._votes.saved
        sync_obj._SyncObj__raftCurrentTerm = restored.term
        sync_obj._SyncObj__votedForNodeId = restored.voted_for
        if restored.term:
            log.info(
                "raft: term %d restored (voted for %s)", restored.term, restored.voted_for or "-"
            )
        self.server_ctx = server_context(link.config.tls, link.name)
        self.client_ctx = client_context(link.config.tls, link.name)
        self.timeout_s = link.timeout_s
        self._peers: dict[Node, _Peer] = {}
        self._server: asyncio.Server | None = None
        self.listening = asyncio.Event()  # set once the raft port accepts connections
        self._connections: set[asyncio.StreamWriter] = set()
        self._closing = False
        # messages waiting for a journal sync: (peer, frame, journal generation before it)
        self._held: collections.deque[tuple[_Peer, bytes, int]] = collections.deque()
        self._syncing = False
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
        self._peers[node] = _Peer(self, node, name, (node.host, node.port))

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
        # Nothing leaves before the term, the vote and the journal are on disk. The term
        # and vote change rarely and are saved at once; the journal is synced in a worker
        # thread, and messages wait for the sync that covers what was written before them.
        obj = self._sync_obj
        self._votes.save(Vote(obj._SyncObj__raftCurrentTerm, obj._SyncObj__votedForNodeId))
        body = pickle.dumps(message, protocol=4)
        frame = _LENGTH.pack(len(body)) + body
        journal = self.link.journal()
        if self.link.failure is not None:
            return False
        if journal is None or (not journal.dirty and not self._held):
            return peer.send(frame)
        if len(self._held) >= _HELD_MAX:
            return False  # syncs are stuck: raft's retransmission covers what is dropped
        self._held.append((peer, frame, journal.written))
        self._sync_soon(journal)
        return True

    def _sync_soon(self, journal: _SyncedJournal) -> None:
        """Start a sync of the journal in a worker thread, unless one is running."""
        if self._syncing or self._closing or self.link.failure is not None:
            return
        self._syncing = True
        generation, index, cuts, fd = journal.begin_sync()
        future = asyncio.get_running_loop().run_in_executor(None, _fsync_and_close, fd)
        future.add_done_callback(partial(self._synced, journal, generation, index, cuts))

    def _synced(
        self,
        journal: _SyncedJournal,
        generation: int,
        index: int,
        cuts: int,
        future: asyncio.Future[None],
    ) -> None:
        self._syncing = False
        if self._closing:
            return
        exc = future.exception() if not future.cancelled() else RuntimeError("cancelled")
        if exc is not None:
            self.link.fail(exc)  # nothing held is sent: the node stops
            return
        journal.end_sync(generation, index, cuts)
        trace.event("jsynced", self.link.name, journal.synced_index)
        while self._held and self._held[0][2] <= journal.synced:
            peer, frame, _ = self._held.popleft()
            peer.send(frame)
        if self._held:
            self._sync_soon(journal)

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
        """Listen for the peers, retrying every second while the port is taken."""
        host, port = self.link.listen
        warned = 0.0
        while self._server is None and not self._closing:
            try:
                self._server = await listen_before_tls(host, port, self._serve)
            except TransportError as exc:
                if time.monotonic() >= warned:
                    log.warning("raft: %s (retrying)", exc)
                    warned = time.monotonic() + 5.0
                await asyncio.sleep(1.0)
        log.info("raft: listening on %s:%d (mutual TLS)", host, port)
        self.listening.set()

    def node_up(self, node: Node) -> None:
        self._onNodeConnected(node)
        self.link.kick()

    def node_down(self, node: Node) -> None:
        if not self._closing:
            self._onNodeDisconnected(node)
            self.link.kick()

    # incoming side
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        where = f"{peer[0]}:{peer[1]}"
        self._connections.add(writer)
        try:
            set_keepalive(writer)
            try:
                await writer.start_tls(self.server_ctx, ssl_handshake_timeout=_CONNECT_TIMEOUT_S)
            except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
                self.link.refused("handshake", f"{where}: {exc}")
                return
            try:
                name = peer_name(writer.get_extra_info("ssl_object"))
            except RTError as exc:
                self.link.refused("identity", f"{peer[0]}: {exc}")
                return
            node = self.link.node_named(name)
            if node is None:
                self.link.refused("identity", f"{peer[0]} presented {name!r}, not a peer node")
                return
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
            peer = self._peers.get(node)
            if peer is not None and message.get("type") == "next_node_idx":
                peer.answered(bool(message.get("success")))
            try:
                self._onMessageReceived(node, message)
            except Exception as exc:  # well-formed pickle, but not a message raft can take
                log.exception("raft: a message from %s could not be handled", name)
                self.link.refused("frame", f"{name}: unhandled message: {exc!r}")
                return
            self.link.kick()


# -- glue between config, transport, journal and pysyncobj ------------------------------


class _Link:
    """What the transport needs to know: names, addresses, the journal, counters."""

    def __init__(self, config: StreamConfig, name: str, journal_path: str) -> None:
        self.config, self.name, self.journal_path = config, name, journal_path
        me = config.node(name)
        self.listen = (me.host, config.ports.raft)
        self.timeout_s = max(2.0, config.sequencer.raft_max_timeout_ms / 1000 * 3)
        self.by_address = {_address(config, n): n for n in config.nodes}
        self.refusals: collections.Counter[str] = collections.Counter()
        self.on_refused: Callable[[str], None] | None = None
        self.kick: Callable[[], None] = lambda: None  # a tick soon: something happened
        self.failure: BaseException | None = None  # a journal sync failed: the node must stop

    def name_of(self, node: Node) -> str:
        return self.by_address[node.id].name

    def node_named(self, name: str) -> Node | None:
        if name == self.name or self.config.role_of(name) is not HostRole.NODE:
            return None
        return TCPNode(_address(self.config, self.config.node(name)))

    def journal(self) -> _SyncedJournal | None:
        return _JOURNALS.get(self.journal_path)

    def fail(self, exc: BaseException) -> None:
        """A journal sync failed. After a failed fsync the kernel may have dropped the
        pages it could not write, so a later sync that succeeds proves nothing: the node
        sends nothing more and stops, and restarts from what its journal holds."""
        if self.failure is None:
            self.failure = exc
            log.critical("raft: syncing the journal failed (%s); this node stops", exc)

    def sync_journal_through(self, index: int) -> None:
        """Make sure raft entries up to ``index`` are on disk (syncing now if not yet)."""
        journal = self.journal()
        if journal is not None and journal.synced_index < index:
            try:
                journal.sync()
            except OSError as exc:
                self.fail(exc)
                raise
            trace.event("jsynced", self.name, journal.synced_index)

    def refused(self, what: str, detail: str) -> None:
        self.refusals[what] += 1
        log.warning("raft: refused %s: %s", what, detail)
        if self.on_refused is not None:
            self.on_refused(what)


def _address(config: StreamConfig, node: NodeConfig) -> str:
    return f"{node.host}:{config.ports.raft}"


class _Replicated(SyncObj):  # type: ignore[misc]
    def __init__(self, machine: StateMachine, link: _Link, **kwargs: Any) -> None:
        self._machine, self._link = machine, link
        self.apply_errors = 0
        super().__init__(**kwargs)

    @replicated  # type: ignore[untyped-decorator]
    def apply(self, command: bytes) -> bool:
        # An entry is acted on only once it is on disk here. Usually a sync has covered
        # it already (an append is answered only after one); if not, sync now.
        index = self._SyncObj__raftLastApplied + 1
        self._link.sync_journal_through(index)
        trace.event("apply", self._link.name, index)
        try:
            return bool(self._machine.apply(command))
        except Exception:  # never raise into pysyncobj: it would retry this entry forever
            self.apply_errors += 1
            log.exception("raft: applying a command failed; it is ignored on this node")
            return False


class RaftNode:
    """One node's raft: propose commands, read role and leader; apply runs the machine."""

    def __init__(
        self, config: StreamConfig, name: str, state_dir: Path, machine: StateMachine
    ) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.config, self.name, self.machine = config, name, machine
        journal = str(state_dir / "raft.journal")
        self._link = _Link(config, name, journal)
        self._snapshot_path = str(state_dir / "raft.snapshot")
        me = TCPNode(_address(config, config.node(name)))
        others = [TCPNode(_address(config, n)) for n in config.nodes if n.name != name]
        link = self._link
        made: list[TlsTransport] = []

        def transport(sync_obj: Any, self_node: Node, other_nodes: Any) -> TlsTransport:
            made.append(TlsTransport(sync_obj, self_node, other_nodes, link=link))
            return made[0]

        self._obj = _Replicated(
            machine,
            link,
            selfNode=me,
            otherNodes=others,
            conf=_conf(config, journal, self._snapshot_path, self._serialize, self._deserialize),
            transportClass=transport,
        )
        self._transport = made[0]
        # pysyncobj wakes its own poller through a pipe on every command; raft is ticked by
        # :meth:`run` instead, and :meth:`propose` asks for the tick itself.
        self._obj._SyncObj__pipeNotifier = _NoNotifier()
        _UNDECODABLE[0] = (self._obj._methodToID[self._obj._getFuncName("apply")], (b"",))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick_pending = False
        self._tick_failures = 0
        self._commit_seen = 0
        self._timer: asyncio.TimerHandle | None = None
        self._next_failure_log = 0.0

    async def wait_listening(self) -> None:
        """Return once raft's port accepts connections."""
        await self._transport.listening.wait()

    async def run(self) -> None:
        """Run raft on this event loop until cancelled: listen, dial every peer, and tick
        whenever something happens (a message, a proposal, a peer up or down) and at least
        every ``_TICK_S`` (election and heartbeat timers). Nothing is sent or applied
        before it runs."""
        self._loop = asyncio.get_running_loop()
        self._link.kick = self._kick
        self._transport.dial()
        try:
            self._tick()  # also arms the timer tick
            await self._transport.listen()
            await asyncio.Event().wait()  # ticks come from kicks and the timer until cancelled
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def _arm_timer(self) -> None:
        """Tick again when raft's next timer is due, unless something kicks it sooner."""
        loop = self._loop
        if loop is None:
            return
        obj = self._obj
        if obj._isLeader():
            due = obj._SyncObj__newAppendEntriesTime
        else:
            due = obj._SyncObj__raftElectionDeadline
        left = due - time.monotonic()
        # a deadline already past was served by the tick that just ran (an election
        # waits for a peer to be connected, and a connection kicks a tick)
        delay = min(left + _TIMER_SLACK_S, _TICK_S) if left > 0 else _TICK_S
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay, self._tick)

    def _kick(self) -> None:
        """A tick as soon as the loop is free (on the loop's thread)."""
        if not self._tick_pending and self._loop is not None:
            self._tick_pending = True
            self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self._tick_pending = False
        try:
            self._obj.doTick(0.0)
            if trace.enabled():
                commit = self._obj._SyncObj__raftCommitIndex
                if commit != self._commit_seen:
                    self._commit_seen = commit
                    trace.event("commit", self.name, commit)
        except Exception:  # pysyncobj's own loop survives a failed tick the same way
            self._tick_failures += 1
            if time.monotonic() >= self._next_failure_log:
                log.exception("raft: a tick failed (%d so far); ticking on", self._tick_failures)
                self._next_failure_log = time.monotonic() + 5.0
        finally:
            self._arm_timer()

    @property
    def apply_errors(self) -> int:
        return int(self._obj.apply_errors)

    @property
    def refusals(self) -> collections.Counter[str]:
        return self._link.refusals

    @property
    def failure(self) -> BaseException | None:
        """Why raft cannot go on here (a failed journal sync), or None."""
        return self._link.failure

    def set_refusal_hook(self, hook: Callable[[str], None]) -> None:
        self._link.on_refused = hook

    def propose(self, command: bytes, done: Callable[[bool, str], None]) -> None:
        """Submit ``command`` (from any thread); ``done(accepted, why)`` runs on raft's
        event loop once it is decided."""

        def callback(result: Any, error: int) -> None:
            if error == FAIL_REASON.SUCCESS:
                done(bool(result), "" if result else "rejected by the state machine")
            else:
                done(False, _FAIL_NAMES.get(error, f"error {error}"))

        self._obj.apply(command, callback=callback)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing: no tick to come
                loop.call_soon_threadsafe(self._kick)

    def leader(self) -> str | None:
        """The leader this node knows of (cheap: no full status)."""
        node = self._obj._getLeader()
        return self._link.name_of(node) if node is not None else None

    def term(self) -> int:
        """The current raft term (cheap: no full status)."""
        return int(self._obj.raftCurrentTerm)

    def status(self) -> RaftStatus:
        s = self._obj.getStatus()
        leader = s.get("leader")
        return RaftStatus(
            role={0: "follower", 1: "candidate", 2: "leader"}.get(s["state"], "unknown"),
            leader=self._link.name_of(leader) if leader is not None else None,
            term=int(s["raft_term"]),
            commit_index=int(s["commit_idx"]),
            last_applied=int(s["last_applied"]),
            has_quorum=bool(s["has_quorum"]),
            log_entries=int(s["log_len"]),
            peers={
                n.name: {
                    "next_index": s.get(f"next_node_idx_server_{_address(self.config, n)}"),
                    "match_index": s.get(f"match_idx_server_{_address(self.config, n)}"),
                }
                for n in self.config.nodes
                if n.name != self.name
            },
            connected=sorted(
                n.name
                for n in self.config.nodes
                if n.name != self.name
                and s.get(f"partner_node_status_server_{_address(self.config, n)}") == 2
            ),
        )

    def is_leader(self) -> bool:
        return bool(self._obj._isLeader())

    def destroy(self) -> None:
        self._obj.destroy()

    # snapshots: JSON, the machine's state plus the two raft entries pysyncobj keeps
    def _serialize(self, path: str, raft_data: Any) -> None:
        last, before, _cluster = raft_data
        doc = {
            "format": 1,
            "state": self.machine.snapshot(),
            "entries": [_entry_json(last), _entry_json(before)],
        }
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())

    def _deserialize(self, path: str) -> tuple[Any, Any, Any]:
        with open(path) as f:
            doc = json.load(f)
        self.machine.restore(doc["state"])
        last, before = (_entry_from_json(e) for e in doc["entries"])
        return last, before, None


_FAIL_NAMES = {
    FAIL_REASON.QUEUE_FULL: "raft queue full",
    FAIL_REASON.MISSING_LEADER: "no leader",
    FAIL_REASON.DISCARDED: "discarded by a new leader",
    FAIL_REASON.NOT_LEADER: "not the leader",
    FAIL_REASON.LEADER_CHANGED: "leader changed",
    FAIL_REASON.REQUEST_DENIED: "request denied",
}


class _NoNotifier:
    """Stands in for pysyncobj's pipe notifier (its poller is not what wakes raft here)."""

    def notify(self) -> None:
        return None


def _entry_json(entry: Any) -> list[Any]:
    command, idx, term = entry
    if isinstance(command, str):
        command = command.encode()
    return [base64.b64encode(command).decode(), int(idx), int(term)]


def _entry_from_json(item: list[Any]) -> tuple[bytes, int, int]:
    return base64.b64decode(item[0]), int(item[1]), int(item[2])


def _conf(
    config: StreamConfig,
    journal: str,
    snapshot: str,
    serialize: Callable[[str, Any], None],
    deserialize: Callable[[str], tuple[Any, Any, Any]],
) -> SyncObjConf:
    seq = config.sequencer
    min_timeout = seq.raft_min_timeout_ms / 1000
    max_timeout = seq.raft_max_timeout_ms / 1000
    return SyncObjConf(
        password=None,  # TLS protects the traffic instead of pysyncobj's own encryption
        autoTick=False,  # ticked by RaftNode.run on the sequencer's event loop
        autoTickPeriod=_TICK_S,
        commandsQueueSize=100_000,
        raftMinTimeout=min_timeout,
        raftMaxTimeout=max_timeout,
        appendEntriesPeriod=seq.append_entries_period_ms / 1000,
        connectionTimeout=max(max_timeout, 2.0),
        connectionRetryTime=1.0,
        leaderFallbackTimeout=max(max_timeout * 2, 2.0),
        appendEntriesUseBatch=False,  # send each new entry and commit at once: latency
        appendEntriesBatchSizeBytes=1 << 16,
        bindAddress=None,  # the transport binds the node's own address
        preferredAddrType="ipv4",
        sendBufferSize=1 << 20,
        recvBufferSize=1 << 20,
        dnsCacheTime=600.0,
        dnsFailCacheTime=30.0,
        logCompactionMinEntries=seq.compaction_min_entries,
        logCompactionMinTime=seq.compaction_min_s,
        logCompactionSplit=True,  # nodes take snapshots at different times
        logCompactionBatchSize=1 << 16,
        commandsWaitLeader=True,
        fullDumpFile=snapshot,
        journalFile=journal,
        bindRetryTime=1.0,
        maxBindRetries=0,
        onReady=None,
        onStateChanged=None,
        dynamicMembershipChange=False,
        pollerType="auto",
        useFork=False,  # serialising in a fork of a threaded process is unsafe
        serializer=serialize,
        serializeChecker=None,
        deserializer=deserialize,
        onCodeVersionChanged=None,
        tcp_keepalive=(KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES),
    )
