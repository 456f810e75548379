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
  it. Here every journal write marks it dirty, and it is synced (fsync, which on
  Linux also writes back pages changed through the mapping) before any raft message
  leaves the node (so no vote and no append acknowledgement is sent for an entry
  that is not on disk) and before a committed entry is applied.
* **Replicated methods never raise.** :meth:`_Replicated.apply` hands the command
  bytes to the state machine and logs and counts anything it raises; a malformed
  command is rejected by the state machine identically on every node.
* **Every ``SyncObjConf`` option is set explicitly** in :func:`_conf`.

* **Term and vote on disk.** pysyncobj keeps them in memory only; the transport
  saves them (:mod:`rt_appliance.sequencer.vote`) before any message leaves the node
  whenever either changed, and restores them when the node starts, so a restarted
  node never votes twice in one term and its term never goes back.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import io
import json
import logging
import os
import pickle
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pysyncobj.journal as _journal
import pysyncobj.pickle as _pso_pickle
import pysyncobj.syncobj as _syncobj
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.node import Node, TCPNode
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.transport import Transport

from rt_appliance.config.model import HostRole, NodeConfig, StreamConfig
from rt_appliance.errors import RTError
from rt_appliance.limits import KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES
from rt_appliance.sequencer.vote import Vote, VoteStore
from rt_appliance.transport.tls import client_context, peer_name, server_context

__all__ = ["RaftNode", "RaftStatus", "StateMachine", "restricted_loads"]

log = logging.getLogger(__name__)

MAX_RAFT_FRAME = 64 << 20
_LENGTH = struct.Struct("<I")
_SEND_QUEUE = 4096  # messages waiting for one peer; beyond, raft's retransmission covers
_CONNECT_TIMEOUT_S = 3.0
_ANSWER_WAIT_S = 0.1  # unanswered this long: send the next append anyway


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
    """pysyncobj's file journal that knows whether it has unsynced writes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dirty = True
        self.syncs = 0
        super().__init__(path)

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self.dirty = True

    def clear(self) -> None:
        super().clear()
        self.dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def sync(self) -> None:
        if not self.dirty:
            return
        resizable = self._FileJournal__journalFile
        # fsync alone: on Linux it also writes back pages dirtied through the shared
        # mapping (msync(MS_SYNC) comes down to the same), so one call does both.
        os.fsync(resizable._ResizableFile__f.fileno())
        self.dirty = False
        self.syncs += 1


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
    """Our outgoing connection to one node: a queue and a sender thread."""

    def __init__(self, transport: TlsTransport, node: Node, name: str, address: tuple[str, int]):
        self.transport, self.node, self.name, self.address = transport, node, name, address
        self.queue: collections.deque[bytes] = collections.deque()
        self.ready = threading.Event()  # messages are waiting
        self.connected = False
        self.stopping = False
        self.in_step = False  # the follower accepted our last append
        self.awaiting = False  # an append is out and its answer not back
        self.awaiting_until = 0.0
        self.thread = threading.Thread(target=self._run, name=f"raft-to-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        backoff = 0.05
        while not self.stopping:
            try:
                sock = self._connect()
            except (OSError, ssl.SSLError, ValueError, RTError) as exc:
                log.debug("raft: cannot reach %s at %s:%d: %s", self.name, *self.address, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            except Exception:  # a bug: keep the link (raft needs it) and say so loudly
                log.exception("raft: unexpected error connecting to %s; retrying", self.name)
                time.sleep(1.0)
                continue
            backoff = 0.05
            self.queue.clear()
            self.in_step = self.awaiting = False
            self.connected = True
            self.transport._event("up", self.node, None)
            log.info("raft: connected to %s at %s:%d", self.name, *self.address)
            try:
                self._pump(sock)
            except (OSError, ssl.SSLError) as exc:
                log.info("raft: connection to %s lost: %s", self.name, exc)
            except Exception:  # a bug: drop this connection, make a new one
                log.exception("raft: unexpected error sending to %s; reconnecting", self.name)
            finally:
                self.connected = False
                sock.close()
                self.transport._event("down", self.node, None)

    def _connect(self) -> ssl.SSLSocket:
        raw = socket.create_connection(self.address, timeout=_CONNECT_TIMEOUT_S)
        try:
            _tune(raw)
            sock = self.transport.client_ctx.wrap_socket(raw, server_hostname=None)
        except BaseException:
            raw.close()
            raise
        try:
            name = peer_name(sock)
            if name != self.name:
                raise ValueError(f"{self.address} presented {name!r}, expected {self.name!r}")
            sock.settimeout(self.transport.timeout_s)
        except BaseException:
            sock.close()
            raise
        return sock

    def _pump(self, sock: ssl.SSLSocket) -> None:
        while not self.stopping:
            if not self.queue:
                self.ready.wait(0.5)
                self.ready.clear()
                continue
            pieces: list[bytes] = []
            while self.queue and len(pieces) < 256:
                pieces.append(self.queue.popleft())
            sock.sendall(b"".join(pieces))

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
        if not self.connected or len(self.queue) >= _SEND_QUEUE:
            return False
        self.queue.append(frame)
        self.ready.set()
        return True


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)


class TlsTransport(Transport):  # type: ignore[misc]
    """pysyncobj transport over mutual TLS; every callback runs in pysyncobj's thread."""

    def __init__(self, sync_obj: Any, self_node: Node, other_nodes: Any, *, link: _Link) -> None:
        super().__init__(sync_obj, self_node, other_nodes)
        self.link = link
        # pysyncobj keeps term and vote in memory only: restore them before its thread
        # starts (it creates the transport after setting both to their initial values).
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
        self._events: collections.deque[tuple[str, Node, Any]] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        sync_obj._poller.subscribe(
            self._wake_r, self._on_wake, POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR
        )
        self._peers: dict[Node, _Peer] = {}
        self._server: socket.socket | None = None
        self._ready = False
        self._closing = False
        self._next_bind_warning = 0.0
        for node in other_nodes:
            self.addNode(node)

    # pysyncobj's interface
    def tryGetReady(self) -> None:
        if self._ready:
            return
        host, port = self.link.listen
        try:
            server = socket.create_server((host, port), reuse_port=False, backlog=64)
        except OSError as exc:
            if time.monotonic() >= self._next_bind_warning:  # pysyncobj retries every tick
                log.warning("raft: cannot listen on %s:%d yet: %s (retrying)", host, port, exc)
                self._next_bind_warning = time.monotonic() + 5.0
            return
        self._server = server
        self._ready = True
        threading.Thread(target=self._accept_loop, name="raft-accept", daemon=True).start()
        log.info("raft: listening on %s:%d (mutual TLS)", host, port)

    @property
    def ready(self) -> bool:
        return self._ready

    def waitReady(self) -> None:
        return None

    def addNode(self, node: Node) -> None:
        name = self.link.name_of(node)
        self._peers[node] = _Peer(self, node, name, (node.host, node.port))

    def dropNode(self, node: Node) -> None:
        peer = self._peers.pop(node, None)
        if peer is not None:
            peer.stopping = True

    def send(self, node: Node, message: Any) -> bool:
        peer = self._peers.get(node)
        if peer is None:
            return False
        if (
            message.get("type") == "append_entries"
            and "serialized" not in message  # snapshot chunks: each one is needed
            and "transmission" not in message  # pieces of one large entry: likewise
            and not peer.may_append()
        ):
            return True  # held back until the follower answers; raft resends from its answer
        # Nothing leaves before the journal, the term and the vote are on disk.
        obj = self._sync_obj
        self._votes.save(Vote(obj._SyncObj__raftCurrentTerm, obj._SyncObj__votedForNodeId))
        self.link.sync_journal()
        body = pickle.dumps(message, protocol=4)
        return peer.send(_LENGTH.pack(len(body)) + body)

    def destroy(self) -> None:
        self._closing = True
        for peer in self._peers.values():
            peer.stopping = True
            peer.ready.set()
        if self._server is not None:
            self._server.close()

    # incoming side
    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._closing:
            try:
                raw, addr = self._server.accept()
            except OSError as exc:
                if self._closing:
                    return
                # Out of descriptors, an aborted connection: this node must keep hearing
                # its peers, so the listener carries on.
                log.warning("raft: accepting a connection failed: %s", exc)
                time.sleep(0.1)
                continue
            try:
                threading.Thread(
                    target=self._serve, args=(raw, addr), name=f"raft-from-{addr[0]}", daemon=True
                ).start()
            except RuntimeError as exc:  # no thread to be had: refuse this one connection
                log.warning("raft: cannot serve %s: %s", addr[0], exc)
                raw.close()

    def _serve(self, raw: socket.socket, addr: tuple[str, int]) -> None:
        raw.settimeout(_CONNECT_TIMEOUT_S)
        try:
            _tune(raw)
            sock = self.server_ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            self.link.refused("handshake", f"{addr[0]}:{addr[1]}: {exc}")
            raw.close()
            return
        with sock:
            try:
                name = peer_name(sock)
            except RTError as exc:
                self.link.refused("identity", f"{addr[0]}: {exc}")
                return
            node = self.link.node_named(name)
            if node is None:
                self.link.refused("identity", f"{addr[0]} presented {name!r}, not a peer node")
                return
            sock.settimeout(None)  # a follower sends nothing to followers; keepalive finds the dead
            try:
                self._read_frames(sock, node, name)
            except (OSError, ssl.SSLError, EOFError) as exc:
                log.info("raft: connection from %s closed: %s", name, exc)

    def _read_frames(self, sock: ssl.SSLSocket, node: Node, name: str) -> None:
        buf = bytearray()
        while not self._closing:
            data = sock.recv(1 << 18)
            if not data:
                raise EOFError("peer closed")
            buf += data
            while len(buf) >= _LENGTH.size:
                (size,) = _LENGTH.unpack_from(buf)
                if size > MAX_RAFT_FRAME:
                    self.link.refused("frame", f"{name}: frame of {size} bytes")
                    return
                if len(buf) < _LENGTH.size + size:
                    break
                body = bytes(buf[_LENGTH.size : _LENGTH.size + size])
                del buf[: _LENGTH.size + size]
                try:
                    message = restricted_loads(body)
                except Exception as exc:  # any decoding failure: the frame is garbage
                    self.link.refused("frame", f"{name}: undecodable frame: {exc}")
                    return
                if not isinstance(message, dict):
                    self.link.refused("frame", f"{name}: frame is not a raft message")
                    return
                self._event("msg", node, message)

    def _event(self, kind: str, node: Node, message: Any) -> None:
        self._events.append((kind, node, message))
        with contextlib.suppress(BlockingIOError):  # full: the tick thread wakes anyway
            os.write(self._wake_w, b"x")

    def _on_wake(self, fd: int, event: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while self._events:
            kind, node, message = self._events.popleft()
            if kind == "msg":
                peer = self._peers.get(node)
                if peer is not None and message.get("type") == "next_node_idx":
                    peer.answered(bool(message.get("success")))
                self._onMessageReceived(node, message)
            elif kind == "up":
                self._onNodeConnected(node)
            else:
                self._onNodeDisconnected(node)


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

    def name_of(self, node: Node) -> str:
        return self.by_address[node.id].name

    def node_named(self, name: str) -> Node | None:
        if name == self.name or self.config.role_of(name) is not HostRole.NODE:
            return None
        return TCPNode(_address(self.config, self.config.node(name)))

    def sync_journal(self) -> None:
        journal = _JOURNALS.get(self.journal_path)
        if journal is not None:
            journal.sync()

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
        self._link.sync_journal()  # an entry is acted on only once it is on disk here
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

        def transport(sync_obj: Any, self_node: Node, other_nodes: Any) -> TlsTransport:
            return TlsTransport(sync_obj, self_node, other_nodes, link=link)

        self._obj = _Replicated(
            machine,
            link,
            selfNode=me,
            otherNodes=others,
            conf=_conf(config, journal, self._snapshot_path, self._serialize, self._deserialize),
            transportClass=transport,
        )
        _UNDECODABLE[0] = (self._obj._methodToID[self._obj._getFuncName("apply")], (b"",))

    @property
    def apply_errors(self) -> int:
        return int(self._obj.apply_errors)

    @property
    def refusals(self) -> collections.Counter[str]:
        return self._link.refusals

    def set_refusal_hook(self, hook: Callable[[str], None]) -> None:
        self._link.on_refused = hook

    def propose(self, command: bytes, done: Callable[[bool, str], None]) -> None:
        """Submit ``command``; ``done(accepted, why)`` runs in raft's thread once decided."""

        def callback(result: Any, error: int) -> None:
            if error == FAIL_REASON.SUCCESS:
                done(bool(result), "" if result else "rejected by the state machine")
            else:
                done(False, _FAIL_NAMES.get(error, f"error {error}"))

        self._obj.apply(command, callback=callback)

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
        autoTick=True,
        autoTickPeriod=0.01,
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
