"""Redis Streams: one ``redis-server`` with its append-only file, and redis-py (hiredis).

The server keeps every write in its append-only file (``appendonly yes``) and syncs it
per ``appendfsync``: ``always`` syncs before it replies (one sync per event-loop pass,
so a pipeline of 1,000 commands shares one), ``everysec`` once a second (up to a
second of acknowledged writes can be lost). Snapshots and AOF rewrites are off, so no
fork runs during a phase.

Publisher: ``XADD bench * d <payload>`` in pipelines (no transaction) of 1,000 per
round trip; a latency tick's messages go in one pipeline. Subscriber: ``XREAD COUNT
1,000 BLOCK 1,000`` from ``0-0``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rt_lab.bench.peers.driver import PeerDriver
from rt_lab.bench.peers.process import ServerGroup, ServerProcess, free_ports, require_binary
from rt_lab.bench.peers.workload import Receiver, Running, full_speed, paced

__all__ = ["RedisDriver", "subscribe"]

KEY = "bench"
READ_COUNT = 1000
READ_BLOCK_MS = 1000
START_TIMEOUT_S = 30.0


class RedisDriver(PeerDriver):
    """A redis-server on 127.0.0.1 with its data in the work directory."""

    start_timeout_s = START_TIMEOUT_S

    def __init__(self, appendfsync: str) -> None:
        self.appendfsync = appendfsync  # "always" or "everysec"

    def start(self, work: Path, servers: ServerGroup) -> Running:
        binary = require_binary("redis-server", "redis-server")
        (port,) = free_ports(1)
        data = work / "data"
        data.mkdir(parents=True, exist_ok=True)
        argv = _argv(binary, port, data, self.appendfsync)
        servers.start(ServerProcess("redis-server", argv, work / "redis-server.log", cwd=data))
        client = _client(port)
        servers.wait("redis-server to answer PING", lambda: bool(client.ping()))
        version = str(client.info("server")["redis_version"])
        client.close()
        return Running(RedisPublisher(port), {"port": port}, __name__, f"Redis {version}")


def _argv(binary: str, port: int, data: Path, appendfsync: str) -> list[str]:
    """redis-server with its append-only file in ``data``, no snapshots and no rewrites."""
    return [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--unixsocket", "",
        "--dir", str(data),
        "--daemonize", "no",
        "--appendonly", "yes",
        "--appendfsync", appendfsync,
        "--save", "",
        "--auto-aof-rewrite-percentage", "0",
        "--logfile", "",
    ]  # fmt: skip


def _client(port: int) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)


class RedisPublisher:
    def __init__(self, port: int) -> None:
        self.port = port

    def reset_stream(self) -> None:
        client = _client(self.port)
        client.delete(KEY)
        client.close()

    def publish_all(self, count: int) -> tuple[int, int]:
        client = _client(self.port)
        try:
            start = full_speed(self._sender(client), count)
            return start, time.monotonic_ns()
        finally:
            client.close()

    def publish_paced(self, rate: int, seconds: float) -> int:
        client = _client(self.port)
        try:
            return paced(self._sender(client), rate, seconds)
        finally:
            client.close()

    @staticmethod
    def _sender(client: Any) -> Callable[[list[bytes]], None]:
        def send(batch: list[bytes]) -> None:
            pipe = client.pipeline(transaction=False)
            for payload in batch:
                pipe.xadd(KEY, {"d": payload})
            pipe.execute()  # raises if any XADD failed

        return send


def subscribe(endpoint: dict[str, Any], receiver: Receiver, ready: Callable[[], None]) -> None:
    client = _client(int(endpoint["port"]))
    last = "0-0"
    ready()
    try:
        while not receiver.finished:
            reply = client.xread({KEY: last}, count=READ_COUNT, block=READ_BLOCK_MS)
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    receiver.take(fields[b"d"])
                    last = entry_id
    finally:
        client.close()
