"""The workload every peer runs: one publisher, one subscriber, the same messages.

A message is 100 bytes::

    0        8        16                               100
    +--------+--------+--------------------------------+
    | seq    | sent   | filler (84 bytes of 0x2e)      |
    +--------+--------+--------------------------------+
    seq   u64 little-endian, 0..N-1 in publishing order
    sent  u64 little-endian, time.monotonic_ns() when the message was built

``time.monotonic_ns`` reads CLOCK_MONOTONIC, which is one clock for the whole machine,
so the subscriber (a process of its own) subtracts ``sent`` from its own reading.

A phase: the peer's stream is created afresh, the subscriber process subscribes from
the beginning and says it is ready, then the publisher (this process) publishes.

* throughput: N messages as fast as the client allows; the figure is N over the time
  from the first publish to the moment the subscriber holds all N;
* latency: ``rate`` msg/s for ``seconds``; every ``TICK_NS`` the publisher sends what
  is due; the subscriber keeps every message's publish-to-receive time.

The subscriber keeps every message's sequence number and, once finished, judges them
with :func:`rt_lab.testing.checkers.count_delivery` (the check the tests use): a
phase with a lost, duplicated or reordered message has failed.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rt_appliance.errors import RTError
from rt_lab.testing.checkers import count_delivery

__all__ = [
    "BATCH",
    "PAYLOAD_BYTES",
    "TICK_NS",
    "PhaseResult",
    "Publisher",
    "Receiver",
    "Running",
    "Ticks",
    "due_count",
    "full_speed",
    "full_speed_async",
    "make_batch",
    "paced",
    "paced_async",
    "run_phase",
    "sequence_problems",
]

PAYLOAD_BYTES = 100
HEADER = struct.Struct("<QQ")  # seq, sent (monotonic ns)
FILLER = b"." * (PAYLOAD_BYTES - HEADER.size)
TICK_NS = 1_000_000  # the latency phase's publisher sends what is due every 1 ms
BATCH = 1000  # the throughput phase's messages per send (one client call or pipeline)
READY_TIMEOUT_S = 60.0  # the subscriber must have subscribed by then
STALL_S = 30.0  # a subscriber that receives nothing for this long gives up
CHILD_EXIT_S = 10.0  # the subscriber must exit this soon after its result, else SIGKILL
SHOWN_PROBLEMS = 5  # sequence problems quoted in a failed phase's reason
SOURCE = ("bench", "publisher")  # the one publisher, as the checker names sources


def make_batch(first_seq: int, count: int) -> list[bytes]:
    """``count`` payloads from ``first_seq`` on, each stamped as it is built."""
    pack, now, filler = HEADER.pack, time.monotonic_ns, FILLER
    return [pack(seq, now()) + filler for seq in range(first_seq, first_seq + count)]


def _batches(count: int) -> Iterator[list[bytes]]:
    """The throughput phase's ``count`` messages, ``BATCH`` at a time; a batch is built
    (and stamped) only when the publisher asks for it, just before it is sent."""
    for first in range(0, count, BATCH):
        yield make_batch(first, min(BATCH, count - first))


def full_speed(send: Callable[[list[bytes]], None], count: int) -> int:
    """Publish ``count`` messages through ``send`` as fast as it takes them; returns the
    monotonic ns of the first publish."""
    start = time.monotonic_ns()
    for batch in _batches(count):
        send(batch)
    return start


async def full_speed_async(send: Callable[[list[bytes]], Awaitable[None]], count: int) -> int:
    """:func:`full_speed` for clients on an event loop."""
    start = time.monotonic_ns()
    for batch in _batches(count):
        await send(batch)
    return start


def due_count(elapsed_ns: int, rate: int, total: int) -> int:
    """How many messages a publisher at ``rate`` msg/s owes ``elapsed_ns`` after it
    started: the first one at once, at most ``total``."""
    if elapsed_ns < 0:
        return 0
    return min(total, elapsed_ns * rate // 1_000_000_000 + 1)


class Ticks:
    """The latency phase's schedule: at each 1 ms tick, the batch that is due."""

    def __init__(self, rate: int, seconds: float) -> None:
        self.rate, self.total = rate, int(rate * seconds)
        self.start = time.monotonic_ns()
        self.sent = self.tick = 0

    @property
    def done(self) -> bool:
        return self.sent >= self.total

    def due(self) -> list[bytes]:
        """The messages owed now (possibly none), stamped as they are built."""
        due = due_count(time.monotonic_ns() - self.start, self.rate, self.total)
        batch = make_batch(self.sent, due - self.sent) if due > self.sent else []
        self.sent = max(self.sent, due)
        return batch

    def wait_s(self) -> float:
        """How long until the next tick at which a message is due (ticks with nothing
        due are slept through: at 20 msg/s, 20 wakes a second)."""
        due_ns = -(-self.sent * 1_000_000_000 // self.rate)  # the next message's time
        self.tick = max(self.tick + 1, -(-due_ns // TICK_NS))
        return max(0, self.start + self.tick * TICK_NS - time.monotonic_ns()) / 1e9


def paced(send: Callable[[list[bytes]], None], rate: int, seconds: float) -> int:
    """Publish ``rate * seconds`` messages through ``send``: on 1 ms ticks, what is due."""
    ticks = Ticks(rate, seconds)
    while not ticks.done:
        if batch := ticks.due():
            send(batch)
        time.sleep(ticks.wait_s())  # pacing: the next tick
    return ticks.sent


async def paced_async(
    send: Callable[[list[bytes]], Awaitable[None]], rate: int, seconds: float
) -> int:
    """:func:`paced` for clients on an event loop."""
    ticks = Ticks(rate, seconds)
    while not ticks.done:
        if batch := ticks.due():
            await send(batch)
        await asyncio.sleep(ticks.wait_s())  # pacing; also lets acks be handled
    return ticks.sent


def sequence_problems(received: Iterable[int], expected: int) -> list[str]:
    """What is wrong with ``received`` (sequence numbers in arrival order) against
    0..expected-1 published in order, judged by the tests' own checker; empty if
    every message arrived exactly once and in order."""
    report = count_delivery(
        ((SOURCE[0], SOURCE[1], seq) for seq in received), {SOURCE: range(expected)}
    )
    if report.clean:
        return []
    found = [
        f"{count:,} {what}"
        for count, what in (
            (report.missing, "lost"),
            (report.duplicated, "duplicated"),
            (report.out_of_order, "out of order"),
            (report.unexpected, "never published"),
        )
        if count
    ]
    return [*found, "e.g. " + "; ".join(report.examples[:SHOWN_PROBLEMS])]


class Receiver:
    """What a subscriber hands every payload to; runs in the subscriber process.

    It keeps each message's sequence number (and latency) as it arrives and judges
    the sequence once the subscriber has finished, outside the timed part."""

    def __init__(self, expected: int, latency: bool, stall_s: float = STALL_S) -> None:
        self.expected = expected
        self.seqs: array[int] = array("q")
        self.latencies: array[int] | None = array("q") if latency else None
        self.first_ns = self.last_ns = 0
        self.stall_ns = int(stall_s * 1e9)
        self._progress_ns = time.monotonic_ns()

    def take(self, payload: bytes) -> None:
        now = time.monotonic_ns()
        seq, sent = HEADER.unpack_from(payload)
        self.seqs.append(seq)
        if self.latencies is not None:
            self.latencies.append(now - sent)
        self.first_ns = self.first_ns or now
        self.last_ns = self._progress_ns = now

    @property
    def finished(self) -> bool:
        """All received, or nothing for the stall time: the subscriber stops."""
        if len(self.seqs) >= self.expected:
            return True
        return time.monotonic_ns() - self._progress_ns > self.stall_ns

    def restart_stall_clock(self) -> None:
        self._progress_ns = time.monotonic_ns()

    def result(self) -> dict[str, Any]:
        return {
            "received": len(self.seqs),
            "problems": sequence_problems(self.seqs, self.expected),
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "latencies": None if self.latencies is None else self.latencies.tobytes(),
        }


class Publisher(Protocol):
    """The publishing side of a peer, in this process."""

    def reset_stream(self) -> None:
        """Delete the benchmark's stream if it exists and create it empty."""

    def publish_all(self, count: int) -> tuple[int, int]:
        """Publish ``count`` messages as fast as the client allows; returns the
        monotonic ns of the first publish and of the last acknowledgement."""
        ...

    def publish_paced(self, rate: int, seconds: float) -> int:
        """Publish at ``rate`` msg/s for ``seconds`` with :func:`paced`; returns the count."""
        ...


@dataclass(frozen=True, slots=True)
class Running:
    """A peer's servers, up: how to publish, and where its subscriber connects."""

    publisher: Publisher
    endpoint: Mapping[str, Any]  # handed to the subscriber process (picklable)
    subscriber_module: str  # whose ``subscribe(endpoint, receiver, ready)`` it runs
    version: str  # the server's name and version, for the report


@dataclass(slots=True)
class PhaseResult:
    """One phase of one peer: ``ok`` only if the subscriber got exactly what was sent."""

    ok: bool
    messages: int
    reason: str = ""
    throughput: float = 0.0  # msg/s end to end (throughput phase)
    acked: float = 0.0  # msg/s until the publisher held every acknowledgement
    latencies_ns: list[int] = field(default_factory=list)  # latency phase, per message
    # shares of one core from the first publish until the subscriber held everything:
    cpu_servers: float = 0.0  # the system's servers (with their helpers)
    cpu_apps: float = 0.0  # the publisher (this process) and the subscriber process


def run_phase(
    peer: Running,
    *,
    count: int = 0,
    rate: int = 0,
    seconds: float = 0.0,
    stall_s: float = STALL_S,
    server_cpu: Callable[[], float] | None = None,
) -> PhaseResult:
    """One phase: throughput if ``count``, else latency at ``rate`` for ``seconds``;
    ``server_cpu`` reads the servers' CPU seconds so far, for their share of the phase.

    The subscriber is a process of its own (``python -m`` this module, so it imports
    only what it needs): it runs ``subscribe(endpoint, receiver, ready)`` of the peer's
    subscriber module and reports, one JSON line each, on a pipe of its own."""
    latency = count == 0
    expected = int(rate * seconds) if latency else count
    publisher = peer.publisher
    publisher.reset_stream()
    args = {
        "module": peer.subscriber_module,
        "endpoint": dict(peer.endpoint),
        "expected": expected,
        "latency": latency,
        "stall_s": stall_s,
    }
    with _Subscriber(args) as sub:
        sub.expect("ready", READY_TIMEOUT_S)
        servers_before = server_cpu() if server_cpu is not None else 0.0
        own_before, began = time.process_time(), time.monotonic()
        if latency:
            start = time.monotonic_ns()
            publisher.publish_paced(rate, seconds)
            acked_ns = time.monotonic_ns()
        else:
            start, acked_ns = publisher.publish_all(count)
        got = sub.expect("result", stall_s + READY_TIMEOUT_S)
        elapsed = max(1e-9, time.monotonic() - began)
        servers = (server_cpu() - servers_before) if server_cpu is not None else 0.0
        own = time.process_time() - own_before
    result = _judge(got, expected, start, acked_ns, latency)
    result.cpu_servers = servers / elapsed
    result.cpu_apps = (own + float(got.get("cpu_s", 0.0))) / elapsed
    return result


class _Subscriber:
    """The subscriber process, its report pipe, and a thread reading that pipe."""

    def __init__(self, args: dict[str, Any]) -> None:
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(write_fd), json.dumps(args)],
                stdin=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                start_new_session=True,  # Ctrl-C reaches this process, which stops it
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self.reader.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd) as pipe:
            for line in pipe:
                self.lines.put(line)
        self.lines.put(None)  # the subscriber closed its end

    def expect(self, kind: str, timeout_s: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RTError(f"the subscriber sent no {kind} within {timeout_s:g} s") from None
        if line is None:
            raise RTError(f"the subscriber exited (status {self.proc.wait()}) before its {kind}")
        report = dict(json.loads(line))
        if report["kind"] == "error":
            raise RTError(f"the subscriber failed: {report['message']}")
        if report["kind"] != kind:
            raise RTError(f"the subscriber sent {report['kind']!r}, expected {kind!r}")
        return report

    def __enter__(self) -> _Subscriber:
        return self

    def __exit__(self, error: type[BaseException] | None, *_: object) -> None:
        try:
            self.proc.wait(0 if error is not None else CHILD_EXIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(CHILD_EXIT_S)


def _judge(
    got: dict[str, Any], expected: int, start_ns: int, acked_ns: int, latency: bool
) -> PhaseResult:
    problems = list(got["problems"])
    if got["received"] < expected and not problems:
        problems.append(f"{expected - got['received']:,} not received")
    if problems:
        reason = f"received {got['received']:,} of {expected:,}: " + "; ".join(problems)
        return PhaseResult(False, expected, reason)
    result = PhaseResult(True, expected)
    if latency:
        result.latencies_ns = array("q", base64.b64decode(got["latencies"])).tolist()
    else:
        result.throughput = expected / max(1, got["last_ns"] - start_ns) * 1e9
        result.acked = expected / max(1, acked_ns - start_ns) * 1e9
    return result


def _subscriber_main(report_fd: int, args: dict[str, Any]) -> None:
    """The subscriber process: subscribe, say ready, receive until finished, report."""
    expected, latency = int(args["expected"]), bool(args["latency"])
    receiver = Receiver(expected, latency, float(args["stall_s"]))
    with os.fdopen(report_fd, "w") as pipe:

        def send(kind: str, **body: Any) -> None:
            pipe.write(json.dumps({"kind": kind, **body}) + "\n")
            pipe.flush()

        cpu_at_ready = [0.0]

        def ready() -> None:
            receiver.restart_stall_clock()
            cpu_at_ready[0] = time.process_time()  # the phase's share, not the start's
            send("ready")

        try:
            subscribe = importlib.import_module(str(args["module"])).subscribe
            subscribe(dict(args["endpoint"]), receiver, ready)
            got = receiver.result()
            if got["latencies"] is not None:
                got["latencies"] = base64.b64encode(got["latencies"]).decode()
            send("result", cpu_s=time.process_time() - cpu_at_ready[0], **got)
        except Exception as exc:  # reported to the parent, which fails the phase
            send("error", message=f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    _subscriber_main(int(sys.argv[1]), json.loads(sys.argv[2]))
