"""A RabbitMQ stream on one node (the ``rabbitmq_stream`` plugin), and rstream.

The broker is started by hand, not as a service: Debian's
``/usr/lib/rabbitmq/bin/rabbitmq-server`` with every directory (database, logs,
configuration, the Erlang cookie's ``$HOME``) in the bench's work directory, a node
name of its own, and an ``epmd`` of its own on a free port, so it meets no other
Erlang node on the machine. RabbitMQ streams do not fsync: they rely on replication,
and this is one node.

Publisher: rstream ``Producer.send_batch`` (1,000 messages per call at full speed; a
latency tick's messages in one call), counting publish confirms. Subscriber:
``Consumer.subscribe`` from the first offset (default credit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rt_appliance.errors import RTError
from rt_lab.bench.peers.driver import AsyncPublisher, PeerDriver, Publish, hold_subscription
from rt_lab.bench.peers.process import (
    ServerGroup,
    ServerProcess,
    free_ports,
    port_open,
    require_binary,
)
from rt_lab.bench.peers.workload import Receiver, Running

__all__ = ["RabbitDriver", "subscribe"]

STREAM = "bench"
USER = PASSWORD = "guest"  # RabbitMQ's default user, allowed from loopback only
START_TIMEOUT_S = 120.0  # the Erlang VM and the broker boot in 5-10 s here
CONFIRM_TIMEOUT_S = 120.0

_CONFIG = """\
listeners.tcp.1 = 127.0.0.1:{amqp}
stream.listeners.tcp.1 = 127.0.0.1:{stream}
stream.advertised_host = 127.0.0.1
stream.advertised_port = {stream}
"""


class RabbitDriver(PeerDriver):
    """A one-node RabbitMQ with the stream plugin, after an epmd of its own."""

    start_timeout_s = START_TIMEOUT_S

    def start(self, work: Path, servers: ServerGroup) -> Running:
        broker = require_binary("rabbitmq-server", "rabbitmq-server", ["/usr/lib/rabbitmq/bin"])
        epmd_binary = require_binary("epmd", "erlang-base")
        epmd_port, dist, amqp, stream = free_ports(4)
        env = _configure(work, epmd_port, dist, amqp, stream)
        epmd = ServerProcess(
            "epmd", [epmd_binary, "-port", str(epmd_port), "-address", "127.0.0.1"],
            work / "epmd.log",
        )  # fmt: skip
        server = ServerProcess("rabbitmq-server", [broker], work / "rabbitmq.log", env, work)
        servers.start(epmd)
        servers.wait("epmd", lambda: port_open(epmd_port))
        servers.start(server)
        servers.wait("RabbitMQ's stream port", lambda: port_open(stream))
        version = f"RabbitMQ {_version(broker)}"
        return Running(RabbitPublisher(stream), {"port": stream}, __name__, version)


def _configure(work: Path, epmd_port: int, dist: int, amqp: int, stream: int) -> dict[str, str]:
    """Write the broker's files to ``work``; the environment that points it at them."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "enabled_plugins").write_text("[rabbitmq_stream].\n")
    (work / "rabbitmq.conf").write_text(_CONFIG.format(amqp=amqp, stream=stream))
    (work / "rabbitmq-env.conf").write_text("")  # not /etc/rabbitmq's
    return {
        "HOME": str(work),  # the Erlang cookie
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_CONF_ENV_FILE": str(work / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(work / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(work / "enabled_plugins"),
        "RABBITMQ_NODENAME": f"rtbench{amqp}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(amqp),
        "RABBITMQ_DIST_PORT": str(dist),
        "RABBITMQ_MNESIA_BASE": str(work / "mnesia"),
        "RABBITMQ_LOG_BASE": str(work / "log"),
        "RABBITMQ_LOGS": "-",  # to its output, which goes to the log file here
        "RABBITMQ_PID_FILE": str(work / "rabbitmq.pid"),
    }


def _version(broker: Path | str) -> str:
    """The broker's version, from the path Debian installs it under."""
    for part in Path(broker).resolve().parts:
        if part.startswith("rabbitmq_server-"):
            return part.removeprefix("rabbitmq_server-")
    lib = Path("/usr/lib/rabbitmq/lib")
    found = sorted(p.name for p in lib.glob("rabbitmq_server-*")) if lib.is_dir() else []
    return found[-1].removeprefix("rabbitmq_server-") if found else "?"


def _producer(port: int) -> Any:
    from rstream import Producer

    return Producer("127.0.0.1", port, username=USER, password=PASSWORD)


class RabbitPublisher(AsyncPublisher):
    def __init__(self, port: int) -> None:
        self.port = port

    async def reset_async(self) -> None:
        async with _producer(self.port) as producer:
            await producer.delete_stream(STREAM, missing_ok=True)
            await producer.create_stream(STREAM)

    async def publishing(self, publish: Publish, count: int) -> tuple[int, int]:
        from rstream import ConfirmationStatus

        confirmed = refused = 0
        all_confirmed = asyncio.Event()

        def on_confirm(status: ConfirmationStatus) -> None:
            nonlocal confirmed, refused
            if status.is_confirmed:
                confirmed += 1
            else:
                refused += 1
            if confirmed + refused >= count:
                all_confirmed.set()

        async with _producer(self.port) as producer:

            async def send(batch: list[bytes]) -> None:
                await producer.send_batch(STREAM, batch, on_publish_confirm=on_confirm)

            start = await publish(send)
            await asyncio.wait_for(all_confirmed.wait(), CONFIRM_TIMEOUT_S)
            acked = time.monotonic_ns()
        if refused:
            raise RTError(f"{refused:,} of {count:,} publishes were not confirmed")
        return start, acked


def subscribe(endpoint: dict[str, Any], receiver: Receiver, ready: Callable[[], None]) -> None:
    asyncio.run(_subscribe(int(endpoint["port"]), receiver, ready))


async def _subscribe(port: int, receiver: Receiver, ready: Callable[[], None]) -> None:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    def take(message: Any, _context: Any) -> None:
        receiver.take(bytes(message))

    async with Consumer("127.0.0.1", port, username=USER, password=PASSWORD) as consumer:
        await consumer.subscribe(
            STREAM, take, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)
        )
        await hold_subscription(receiver, ready)
