"""NATS JetStream, replicated over three ``nats-server`` processes (R3), and nats-py.

Three servers on 127.0.0.1 form a cluster (routes on loopback) with JetStream on, each
with its own store directory. The stream is file storage with 3 replicas: a publish is
acknowledged once a quorum (2 of 3) has stored it. JetStream syncs its files every
``sync_interval`` (2 minutes by default), not per message.

Publisher (connected to n1): ``js.publish_async`` for every message (at most 4,000
acknowledgements outstanding, nats-py's default), then ``publish_async_completed``.
Subscriber (connected to n3): an ordered push consumer (``ordered_consumer=True``,
deliver policy all: no acks, flow control and heartbeats by the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rt_appliance.errors import RTError
from rt_lab.bench.peers.driver import AsyncPublisher, PeerDriver, Publish, hold_subscription
from rt_lab.bench.peers.process import ServerGroup, ServerProcess, free_ports, require_binary
from rt_lab.bench.peers.workload import Receiver, Running

__all__ = ["NatsDriver", "subscribe"]

NODES = 3
STREAM = "BENCH"
SUBJECT = "bench"
START_TIMEOUT_S = 60.0
ACK_TIMEOUT_S = 120.0  # every outstanding acknowledgement must arrive by then
STREAM_TIMEOUT_S = 30.0  # creating the stream (a JetStream leader must be elected)

_CONFIG = """\
server_name: {name}
listen: 127.0.0.1:{client}
http: 127.0.0.1:{monitor}
jetstream {{
  store_dir: "{store}"
  max_memory_store: 256MB
  max_file_store: 16GB
}}
cluster {{
  name: rtbench
  listen: 127.0.0.1:{route}
  routes: [{routes}]
}}
"""


class NatsDriver(PeerDriver):
    """Three clustered nats-servers with JetStream on."""

    start_timeout_s = START_TIMEOUT_S

    def start(self, work: Path, servers: ServerGroup) -> Running:
        binary = require_binary("nats-server", "nats-server")
        ports = free_ports(3 * NODES)
        clients, monitors, routes = ports[:NODES], ports[NODES : 2 * NODES], ports[2 * NODES :]
        servers.start(*_nodes(binary, work, clients, monitors, routes))
        urls = [f"nats://127.0.0.1:{p}" for p in clients]
        servers.wait("JetStream on all three nats-servers", lambda: _healthy(monitors))
        version = _version(monitors[0])
        return Running(NatsPublisher(urls[0]), {"url": urls[-1]}, __name__, f"NATS {version}")


def _nodes(
    binary: str, work: Path, clients: list[int], monitors: list[int], routes: list[int]
) -> list[ServerProcess]:
    """The cluster's nats-servers, each with its configuration written to ``work``."""
    route_urls = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    servers = []
    for i in range(NODES):
        name = f"n{i + 1}"
        config = work / f"{name}.conf"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            _CONFIG.format(
                name=name,
                client=clients[i],
                monitor=monitors[i],
                store=work / name,
                route=routes[i],
                routes=route_urls,
            )
        )
        servers.append(ServerProcess(f"nats-server {name}", [binary, "-c", str(config)],
                                     work / f"{name}.log"))  # fmt: skip
    return servers


def _healthy(monitors: list[int]) -> bool:
    for port in monitors:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
            if json.load(reply).get("status") != "ok":
                return False
    return True


def _version(monitor: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=2) as reply:
        return str(json.load(reply).get("version", "?"))


class NatsPublisher(AsyncPublisher):
    def __init__(self, url: str) -> None:
        self.url = url

    async def reset_async(self) -> None:
        import nats
        from nats.js.api import StorageType
        from nats.js.errors import NotFoundError

        nc = await nats.connect(self.url)
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + STREAM_TIMEOUT_S
            while True:  # until the cluster has a JetStream meta leader
                try:
                    with contextlib.suppress(NotFoundError):
                        await js.delete_stream(STREAM)
                    await js.add_stream(name=STREAM, subjects=[SUBJECT],
                                        storage=StorageType.FILE, num_replicas=NODES)  # fmt: skip
                    return
                except Exception as exc:
                    if time.monotonic() > deadline:
                        raise RTError(f"JetStream stream not created: {exc}") from exc
                    await asyncio.sleep(0.5)
        finally:
            await nc.close()

    async def publishing(self, publish: Publish, count: int) -> tuple[int, int]:
        """Every publish is acknowledged on its own future, so ``count`` is not needed."""
        import nats

        nc = await nats.connect(self.url)
        try:
            js = nc.jetstream()
            acks: list[asyncio.Future[Any]] = []

            async def send(batch: list[bytes]) -> None:
                for payload in batch:
                    acks.append(await js.publish_async(SUBJECT, payload))

            start = await publish(send)
            await asyncio.wait_for(js.publish_async_completed(), ACK_TIMEOUT_S)
            acked = time.monotonic_ns()
            failed = [f.exception() for f in acks if f.exception() is not None]
            if failed:
                raise RTError(f"{len(failed):,} publishes not acknowledged, e.g. {failed[0]}")
            return start, acked
        finally:
            await nc.close()


def subscribe(endpoint: dict[str, Any], receiver: Receiver, ready: Callable[[], None]) -> None:
    asyncio.run(_subscribe(str(endpoint["url"]), receiver, ready))


async def _subscribe(url: str, receiver: Receiver, ready: Callable[[], None]) -> None:
    import nats
    from nats.aio.msg import Msg
    from nats.js.api import DeliverPolicy

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()

        async def handle(msg: Msg) -> None:
            receiver.take(msg.data)

        sub = await js.subscribe(SUBJECT, cb=handle, ordered_consumer=True,
                                 deliver_policy=DeliverPolicy.ALL)  # fmt: skip
        await hold_subscription(receiver, ready)
        await sub.unsubscribe()
    finally:
        await nc.close()
