"""FETCH: one RT node reads raw bytes of a stream file of another node.

The sequencer uses it to repair input bytes a node lacks (``in/<topic>.<host>``,
the replicas the push server writes) and to copy merged-log bytes when a node is
far behind (``merged``, what the pull server serves). It runs on the pull server,
on a connection whose HELLO says role ``fetch``; only a host whose certificate
names a node of the stream may open one::

    -> FETCH {dir, position, max_bytes}      <- FETCHED {head} + bytes   (any number of times)
                                             <- ERROR {message, retryable} before closing

``dir`` is ``"merged"`` or ``"in/<topic>.<host>"``. ``position`` names the file
``log.<session>.<roll>`` of that directory and an offset in it (0: the first byte
of its file header). The answer holds up to ``max_bytes`` bytes from there
(fewer at the end of the file, and never more than the frame limit allows), as
they are on disk now: no records are parsed or checked, the caller validates.
Its head (:meth:`Fetched.head`) says how large the file is, which file comes
next and which is the oldest. The directory listing is read before the file, so
when ``next_file`` is set, the file had already rolled and ``file_size`` is final.

This module holds both sides: the server's :func:`fetch_dir` and
:func:`read_part`, and :class:`PeerFetcher`, the client for plain threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rt_appliance.config.model import NodeConfig, StreamConfig
from rt_appliance.errors import (
    FrameError,
    InvalidPositionError,
    LogError,
    PeerRejectedError,
    RTError,
    TransportError,
    UsageError,
)
from rt_appliance.limits import FETCH_TIMEOUT_S, FETCHER_CLOSE_WAIT_S
from rt_appliance.log.naming import file_name, parse_publisher_dir, publisher_dir_name
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.replicate.topology import Endpoint, peer_endpoints, pull_source_dir
from rt_appliance.transport.framing import FRAME_HEADER, write_pieces
from rt_appliance.transport.listen import set_keepalive
from rt_appliance.transport.messages import (
    FrameType,
    decode_control,
    decode_fetched,
    encode_fetched,
    require,
)
from rt_appliance.transport.session import Connection, connect
from rt_appliance.transport.tls import client_context

__all__ = [
    "FETCH_ROLE",
    "MERGED_DIR",
    "FetchRequest",
    "Fetched",
    "PeerFetcher",
    "fetch_dir",
    "fetch_range",
    "read_part",
    "send_fetched",
]

log = logging.getLogger(__name__)

FETCH_ROLE = "fetch"  # the HELLO role of a node that sends FETCH
MERGED_DIR = "merged"
IN_PREFIX = "in/"


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One FETCH: which directory, from which position, at most how many bytes."""

    dir: str
    position: Position
    max_bytes: int

    def fields(self) -> dict[str, Any]:
        return {"dir": self.dir, "position": int(self.position), "max_bytes": self.max_bytes}

    @classmethod
    def parse(cls, fields: dict[str, Any]) -> FetchRequest:
        """A FETCH frame's fields, checked (:class:`FrameError` if malformed)."""
        max_bytes = require(fields, "max_bytes", int)
        if max_bytes < 0:
            raise FrameError(f"FETCH max_bytes is negative: {max_bytes}")
        return cls(require(fields, "dir", str), _position(fields, "position"), max_bytes)


@dataclass(frozen=True, slots=True)
class Fetched:
    """The answer to one FETCH.

    ``data`` is the file's bytes from ``position`` on (empty at or past its end, or
    when ``missing``). ``file_size`` is the file's size when it was read (0 when
    missing). ``next_file`` is the start of the first file after ``position``'s file
    in (session, roll) order, ``oldest`` the start of the directory's first file;
    each None if there is none.
    """

    position: Position
    data: bytes
    file_size: int
    next_file: Position | None
    oldest: Position | None
    missing: bool

    def head(self, dir: str) -> dict[str, Any]:
        """The JSON head of the FETCHED frame that carries this answer."""
        return {
            "dir": dir,
            "position": int(self.position),
            "file_size": self.file_size,
            "next_file": None if self.next_file is None else int(self.next_file),
            "oldest": None if self.oldest is None else int(self.oldest),
            "missing": self.missing,
        }

    @classmethod
    def from_frame(cls, request: FetchRequest, body: bytes) -> Fetched:
        """Decode a FETCHED body and check that it answers ``request``."""
        head, payload = decode_fetched(body)
        fetched = cls(
            _position(head, "position"),
            bytes(payload),
            require(head, "file_size", int),
            _optional_position(head, "next_file"),
            _optional_position(head, "oldest"),
            require(head, "missing", bool),
        )
        problem = None
        if head.get("dir") != request.dir or fetched.position != request.position:
            problem = f"answers {head.get('dir')!r} at {fetched.position}"
        elif len(fetched.data) > request.max_bytes:
            problem = f"holds {len(fetched.data)} bytes, more than the {request.max_bytes} asked"
        elif fetched.missing and fetched.data:
            problem = "holds bytes of a missing file"
        elif fetched.data and request.position.offset + len(fetched.data) > fetched.file_size:
            problem = f"holds bytes past the file's size {fetched.file_size}"
        if problem:
            raise FrameError(f"FETCHED {problem} (asked: {request.dir!r} at {request.position})")
        return fetched


def _position(fields: dict[str, Any], key: str) -> Position:
    """``fields[key]`` as a Position; :class:`FrameError` if missing or not one."""
    try:
        return Position.parse(require(fields, key, int))
    except InvalidPositionError as exc:
        raise FrameError(f"frame field {key!r}: {exc}") from None


def _optional_position(fields: dict[str, Any], key: str) -> Position | None:
    """``fields[key]`` as a Position, None if it is null (but present)."""
    if key not in fields:
        raise FrameError(f"frame field {key!r} missing")
    return None if fields[key] is None else _position(fields, key)


def fetch_range(
    fetcher: PeerFetcher,
    peer: str,
    dir: str,
    start: Position,
    end: Position,
    stopping: Callable[[], bool] = lambda: False,
) -> bytes | None:
    """The bytes [start, end) of one file of ``peer``'s ``dir``, in as many FETCHes as
    the frame limit takes; None when the peer's copy lacks the file or ends before
    ``end``. Raises :class:`RTError` when the peer fails, or once ``stopping()``."""
    chunks: list[bytes] = []
    at = start
    while at < end:
        if stopping():
            raise RTError("stopping")
        got = fetcher.fetch(peer, dir, at, end.offset - at.offset)
        if got.missing or not got.data:
            return None
        chunks.append(got.data)
        at = at.with_offset(at.offset + len(got.data))
    return b"".join(chunks)[: end.offset - start.offset]


# -- the server's side ---------------------------------------------------------------------


def fetch_dir(config: StreamConfig, node: NodeConfig, name: str) -> Path:
    """The directory of ``node`` that FETCH ``dir`` names; only ``merged`` (the pull source)
    and ``in/<topic>.<host>`` (a publisher directory's replica) exist, never a path."""
    if name == MERGED_DIR:
        return pull_source_dir(config, node)
    if name.startswith(IN_PREFIX):
        publisher = name[len(IN_PREFIX) :]
        parsed = parse_publisher_dir(publisher)
        if parsed is not None and publisher_dir_name(*parsed) == publisher:
            return config.data_dir_of(node) / "in" / publisher
    raise PeerRejectedError(
        f"cannot FETCH from directory {name!r}: it is {MERGED_DIR!r} or "
        f"'{IN_PREFIX}<topic>.<host>' (a publisher directory name)"
    )


def read_part(directory: Path, position: Position, max_bytes: int) -> Fetched:
    """Up to ``max_bytes`` raw bytes of ``position``'s file from its offset, and the head.

    The listing is read before the file: a writer only appends to the newest file, so
    when a later file is listed, ``file_size`` is that file's final size.
    """
    files = list_files(directory)
    oldest = Position.of(files[0].session, files[0].roll, 0) if files else None
    later = [f for f in files if f.key > position.file_key]
    next_file = Position.of(later[0].session, later[0].roll, 0) if later else None
    path = directory / file_name(position.session, position.roll)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Fetched(position, b"", 0, next_file, oldest, missing=True)
    except OSError as exc:
        raise LogError(f"{path}: cannot open: {exc.strerror}") from exc
    try:
        size = os.fstat(fd).st_size
        count = min(max_bytes, size - position.offset)
        data = os.pread(fd, count, position.offset) if count > 0 else b""
    except OSError as exc:
        raise LogError(f"{path}: cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return Fetched(position, data, size, next_file, oldest, missing=False)


async def send_fetched(conn: Connection, dir: str, fetched: Fetched) -> None:
    """Send ``fetched`` as one FETCHED frame (its bytes are not copied)."""
    head, payload = encode_fetched(fetched.head(dir), fetched.data)
    frame_header = FRAME_HEADER.pack(len(head) + len(payload) + 1, FrameType.FETCHED)
    try:
        await write_pieces(conn.writer, [frame_header, head, payload])
    except (ssl.SSLError, OSError) as exc:
        raise TransportError(f"connection to {conn.peer} failed: {exc}") from exc


# -- the client's side ---------------------------------------------------------------------


class _Refused(TransportError):
    """The peer answered ERROR {retryable: true}: a later call may work; this one does not
    reconnect and ask again."""


class PeerFetcher:
    """FETCH from other nodes' pull servers, called from plain (non-asyncio) threads.

    Keeps one connection per peer node, made on first use and reused; a connection
    that fails is dropped and the next call makes a new one (a call that finds its
    reused connection closed reconnects once by itself: FETCH only reads, so asking
    again is safe). Calls to the same peer take turns on its connection; calls to
    different peers run side by side. The connections live on an event loop of the
    fetcher's own, in a daemon thread. ``local_name`` must be a node of ``config``.
    """

    def __init__(self, config: StreamConfig, local_name: str) -> None:
        config.node(local_name)  # UsageError if not a node: only nodes may FETCH
        self.config = config
        self.local_name = local_name
        self._context = client_context(config.tls, local_name)
        self._endpoints: dict[str, Endpoint] = {e.name: e for e in peer_endpoints(config)}
        self._conns: dict[str, Connection] = {}  # touched only on the loop
        self._locks: dict[str, asyncio.Lock] = {}  # touched only on the loop
        self._closed = False
        self._state = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"peer-fetcher-{local_name}", daemon=True
        )
        self._thread.start()

    def fetch(
        self,
        node_name: str,
        dir: str,
        position: Position,
        max_bytes: int,
        timeout_s: float = FETCH_TIMEOUT_S,
    ) -> Fetched:
        """Up to ``max_bytes`` bytes of ``dir``'s file at ``position`` on node ``node_name``.

        Raises :class:`TransportError` when the node cannot be reached or does not answer
        within ``timeout_s``, :class:`PeerRejectedError` when it refuses the request (a bad
        directory name, this host not a node there) and :class:`FrameError` for an answer
        that breaks the protocol.
        """
        if node_name not in self._endpoints:
            self.config.node(node_name)  # raises UsageError naming the nodes
        request = FetchRequest(dir, Position.parse(position), max_bytes)
        with self._state:
            if self._closed:
                raise UsageError(f"fetcher of {self.local_name} is closed")
            future = asyncio.run_coroutine_threadsafe(
                self._fetch(node_name, request, timeout_s), self._loop
            )
        try:
            return future.result(timeout_s + FETCHER_CLOSE_WAIT_S)
        except concurrent.futures.CancelledError:
            raise TransportError(f"FETCH from {node_name} cancelled: the fetcher closed") from None
        except TimeoutError:  # only if the loop itself is stuck
            future.cancel()
            raise TransportError(f"FETCH from {node_name}: no answer in {timeout_s}s") from None

    def close(self) -> None:
        """Close every connection and stop the loop; calls in progress fail."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(TimeoutError, concurrent.futures.CancelledError):
            future.result(FETCHER_CLOSE_WAIT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(FETCHER_CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> PeerFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _fetch(self, node: str, request: FetchRequest, timeout_s: float) -> Fetched:
        """One FETCH within ``timeout_s`` (waiting for the peer's connection included)."""
        lock = self._locks.setdefault(node, asyncio.Lock())
        try:
            async with asyncio.timeout(timeout_s):
                async with lock:
                    try:
                        return await self._exchange(node, request)
                    except BaseException:
                        await self._drop(node)  # its state is unknown: never reuse it
                        raise
        except TimeoutError:
            raise TransportError(
                f"FETCH {request.dir!r} at {request.position} from {node}: "
                f"no answer within {timeout_s}s"
            ) from None

    async def _exchange(self, node: str, request: FetchRequest) -> Fetched:
        conn = self._conns.get(node)
        if conn is not None:
            try:
                return self._answer(conn, request, *await self._round_trip(conn, request))
            except TransportError as exc:
                if not exc.retryable or isinstance(exc, _Refused):
                    raise
                await self._drop(node)
                log.info(
                    "%s: connection to %s failed (%s); reconnecting", self.local_name, node, exc
                )
        conn = await self._connect(node)
        return self._answer(conn, request, *await self._round_trip(conn, request))

    async def _connect(self, node: str) -> Connection:
        target = self._endpoints[node]
        conn, _ = await connect(
            target.host, target.port, self._context, self.config, self.local_name, FETCH_ROLE,
            node,
        )  # fmt: skip
        set_keepalive(conn.writer)
        self._conns[node] = conn
        log.info("%s: connected to %s (%s:%d) to fetch", self.local_name, node, target.host,
                 target.port)  # fmt: skip
        return conn

    @staticmethod
    async def _round_trip(conn: Connection, request: FetchRequest) -> tuple[int, bytes]:
        await conn.send(FrameType.FETCH, request.fields())
        return await conn.receive()

    @staticmethod
    def _answer(conn: Connection, request: FetchRequest, frame_type: int, body: bytes) -> Fetched:
        if frame_type == FrameType.FETCHED:
            return Fetched.from_frame(request, body)
        if frame_type == FrameType.ERROR:
            fields = decode_control(frame_type, body)
            message = f"{conn.peer} refused FETCH: {fields.get('message', '?')}"
            raise _Refused(message) if fields.get("retryable") else PeerRejectedError(message)
        raise FrameError(f"{conn.peer} answered FETCH with frame type {frame_type}")

    async def _drop(self, node: str) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            await conn.close()

    async def _shutdown(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for node in list(self._conns):
            with contextlib.suppress(RTError):
                await self._drop(node)
