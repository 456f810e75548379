"""The one shape of every system ``rt bench peers`` runs: a :class:`Driver` per row.

The runner knows drivers only. A driver says whether its row can run here, brings its
system up for the row's runs (:meth:`Driver.running`, a :class:`System` that knows its
version) and takes it down after them; each run of the system is a :class:`RunOutcome`.

A peer (:class:`PeerDriver`) starts its servers here, once per row, through a
:class:`~rt_lab.bench.peers.process.ServerGroup` that stops them whatever happens, and
every run is the same two phases of :func:`~rt_lab.bench.peers.workload.run_phase`.
A peer's module holds its driver, its publisher and a module-level
``subscribe(endpoint, receiver, ready)``, which the subscriber process imports by the
module's name. Our stream (:mod:`.ours`) starts its servers in each run instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rt_lab.bench.peers.process import ServerGroup
from rt_lab.bench.peers.workload import (
    Receiver,
    Running,
    full_speed_async,
    paced_async,
    run_phase,
)
from rt_lab.bench.stats import percentile

__all__ = [
    "AsyncPublisher",
    "Driver",
    "PeerDriver",
    "PeerSystem",
    "Progress",
    "Publish",
    "RunOutcome",
    "Send",
    "System",
    "Workload",
    "hold_subscription",
    "latency_summary_ms",
]

Progress = Callable[[str], None]
Send = Callable[[list[bytes]], Awaitable[None]]  # hands a batch to an event-loop client
Publish = Callable[[Send], Awaitable[int]]  # a publishing schedule, given a sender
POLL_S = 0.01  # an event-loop subscriber's check for "finished"


@dataclass(frozen=True, slots=True)
class Workload:
    """What every run measures, the same on every system."""

    messages: int  # the throughput phase's
    rate: int  # msg/s of the latency phase
    seconds: float  # the latency phase's length


@dataclass(slots=True)
class RunOutcome:
    """One run of one row: a throughput phase and a latency phase."""

    ok: bool
    reason: str = ""
    throughput: float = 0.0  # msg/s end to end
    acked: float = 0.0  # msg/s until every publish was acknowledged (peers only)
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    # During the latency phase, shares of one core: the system's servers (our nodes'
    # processes), and the publishing and subscribing applications (with their clients).
    cpu_servers: float = 0.0
    cpu_apps: float = 0.0
    # Every message's latency, where the system reports them (the peers), for the CDF.
    samples_ns: list[int] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "throughput_msg_s": self.throughput,
            "publish_acked_msg_s": self.acked or None,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "cpu_servers_percent": 100 * self.cpu_servers,
            "cpu_apps_percent": 100 * self.cpu_apps,
        }


def latency_summary_ms(samples_ns: list[int]) -> tuple[float, float, float]:
    """p50, p99 and max of ``samples_ns``, in ms."""
    p50, p99, worst = (percentile(samples_ns, p) / 1e6 for p in (50, 99, 100))
    return p50, p99, worst


class System(Protocol):
    """A system brought up for a row's runs."""

    @property
    def version(self) -> str:
        """Its name and version, for the table."""
        ...

    def run(self, number: int, workload: Workload, progress: Progress) -> RunOutcome:
        """The row's run ``number`` (from 1)."""
        ...


class Driver(ABC):
    """One system in one configuration: what a row of the table runs."""

    # Whether the system's servers are started here, once for all of the row's runs.
    # If so, the runner says it starts them, and a failure to start or stop them fails
    # the row's remaining runs; otherwise an error is the bench's own and ends it.
    starts_servers: ClassVar[bool] = True

    def skip_reason(self) -> str:
        """Why the row cannot run here, or "" if it can."""
        return ""

    @abstractmethod
    def running(self, work: Path) -> contextlib.AbstractContextManager[System]:
        """The system, up for the row's runs with its files in ``work``; down after."""


class PeerDriver(Driver):
    """A peer: servers started here, a publisher in this process and a subscriber in a
    process of its own."""

    start_timeout_s: ClassVar[float]  # for each readiness check of its servers

    @contextlib.contextmanager
    def running(self, work: Path) -> Iterator[System]:
        servers = ServerGroup(self.start_timeout_s)
        try:
            yield PeerSystem(self.start(work, servers), servers)
        finally:
            servers.stop()

    @abstractmethod
    def start(self, work: Path, servers: ServerGroup) -> Running:
        """Configure the servers in ``work``, start them with ``servers`` and wait until
        they serve; what publishes to them, where a subscriber connects, the version."""


@dataclass(frozen=True, slots=True)
class PeerSystem:
    """A peer's servers, up: each run is a throughput phase, then a latency phase."""

    peer: Running
    servers: ServerGroup

    @property
    def version(self) -> str:
        return self.peer.version

    def run(self, number: int, workload: Workload, progress: Progress) -> RunOutcome:
        """A failed check or an error fails the run; the next run starts afresh."""
        try:
            tput = run_phase(self.peer, count=workload.messages)
            if not tput.ok:
                return RunOutcome(False, f"throughput: {tput.reason}")
            lat = run_phase(
                self.peer,
                rate=workload.rate,
                seconds=workload.seconds,
                server_cpu=self.servers.cpu_seconds,
            )
            if not lat.ok:
                return RunOutcome(False, f"latency: {lat.reason}")
        except Exception as exc:
            return RunOutcome(False, f"{type(exc).__name__}: {exc}")
        p50, p99, worst = latency_summary_ms(lat.latencies_ns)
        return RunOutcome(
            True,
            "",
            tput.throughput,
            tput.acked,
            p50,
            p99,
            worst,
            lat.cpu_servers,
            lat.cpu_apps,
            lat.latencies_ns,
        )


class AsyncPublisher(ABC):
    """A :class:`~rt_lab.bench.peers.workload.Publisher` whose client runs on an event
    loop, one ``asyncio.run`` a call. The client's own parts: creating the stream, and
    connecting, sending and collecting every acknowledgement around a schedule."""

    def reset_stream(self) -> None:
        asyncio.run(self.reset_async())

    def publish_all(self, count: int) -> tuple[int, int]:
        return asyncio.run(self.publishing(lambda send: full_speed_async(send, count), count))

    def publish_paced(self, rate: int, seconds: float) -> int:
        total = int(rate * seconds)
        asyncio.run(self.publishing(lambda send: paced_async(send, rate, seconds), total))
        return total

    @abstractmethod
    async def reset_async(self) -> None:
        """Delete the benchmark's stream if it exists and create it empty."""

    @abstractmethod
    async def publishing(self, publish: Publish, count: int) -> tuple[int, int]:
        """Connect, run ``publish`` with a sender, wait for the ``count`` messages'
        acknowledgements and check them; returns (what ``publish`` returned, monotonic
        ns when all were acknowledged)."""


async def hold_subscription(receiver: Receiver, ready: Callable[[], None]) -> None:
    """Say ready, then keep the loop (and its subscription) running until ``receiver``
    has finished: all received, or nothing for its stall time."""
    ready()
    while not receiver.finished:
        await asyncio.sleep(POLL_S)
