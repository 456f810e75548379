"""``rt bench floor``: the least each kind of step on a message's path costs on this machine.

A message crosses a stream in steps of four kinds:

* **tls**: a frame from one Python process to another over a mutual TLS 1.3 link on
  asyncio, as every rt link is (one way: the sender's write, the receiver's wake and read);
  ``--loop uvloop`` runs it, the inotify wake and the thread hand-off on uvloop instead,
  and ``--loop both`` runs the two side by side, run after run;
* **inotify**: a process blocked on an inotify watch wakes because another one wrote a
  file, and reads what was written (``rt push-client`` and ``rt pull-client`` follow files
  this way; the in-process clients and the node do not);
* **sync**: an ``fdatasync`` of a small append to a file on the work directory's disk;
* **thread**: an asyncio event loop hands a call to a worker thread and gets it back (a
  node's journal syncs and its merger run off the loop).

Each is measured alone, between bare processes that do nothing else, at an idle rate and
at one step per millisecond (the publishing tick of the latency runs): its latency and
the CPU it costs. Two counts of steps one after another give the floors:

* :data:`PATH`: a message's way through a 3-node stream as rt lays it out (the
  application's Publisher, ``rt node``, the application's Subscriber);
* :data:`HOSTS`: what any 3-node stream that replicates before it delivers crosses between
  hosts, whatever its process layout: the hops and the follower's sync, no hand-offs.

For each count: the idle latency (the steps' median latencies at the idle rate, added up)
and the CPU when every publishing tick (one per millisecond) makes its own trip, as a
latency of a few milliseconds requires (the steps' CPU at one per millisecond, added up,
a thousand times a second; the fan-out to the second follower and the leader's own sync
are not counted, so it is a lower bound).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import struct
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rt_appliance.certs.authority import create_ca, issue_host_cert
from rt_appliance.certs.files import cert_pem, key_pem
from rt_appliance.config.model import TlsConfig
from rt_appliance.log.watch import AsyncDirectoryWatcher
from rt_appliance.transport.tls import client_context, server_context
from rt_lab.bench.stats import Result, percentile

__all__ = [
    "HOSTS",
    "KINDS",
    "LOOPS",
    "PATH",
    "FloorResults",
    "StepFigures",
    "run_floor_bench",
    "run_on",
]

KINDS = ("tls", "inotify", "sync", "thread")
# The event loops a step can run on: asyncio's own and uvloop's (libuv; every daemon's,
# rt_appliance.transport.loops), measured side by side.
LOOPS = ("asyncio", "uvloop")
FRAME_BYTES = 100
_LEN = struct.Struct("<I")
_TS = struct.Struct("<q")
T = TypeVar("T")
_STOP = 0  # a frame of length 0 ends a TLS run: the echo answers with its CPU seconds

# The steps one after another from Publisher.publish() to Subscriber.read(), idle, as rt
# lays a stream out: the application's sender thread wakes (half a thread hand-off) and
# sends to the leader (tls); the leader writes the input and proposes on its loop (its
# journal syncs alongside, off the path) and sends the entry (tls); the follower syncs
# its journal on a worker thread (thread, sync) and answers (tls); the leader commits and
# applies, its merger thread writes and wakes the pull connection on the loop (thread),
# which sends to the subscriber (tls); the application's pull thread wakes its reader
# (half a thread hand-off).
PATH: dict[str, int] = {"tls": 4, "inotify": 0, "sync": 1, "thread": 3}
# Between hosts, whatever the layout: publisher to leader, the entry to a follower, its
# sync, its answer, leader to subscriber.
HOSTS: dict[str, int] = {"tls": 4, "inotify": 0, "sync": 1, "thread": 0}
# the floors reported: (name, counts, the stream's idle-latency goal: 3 ms at 20 msg/s)
_FLOORS = (("", PATH, "<= 3"), (" between hosts", HOSTS, "<= 3"))


@dataclass(slots=True)
class StepFigures:
    """One kind of step at one rate: latencies (seconds) and CPU seconds per step."""

    latencies: list[float]
    cpu_per_step: float

    def p(self, q: float) -> float:
        return percentile(self.latencies, q)


@dataclass(slots=True)
class FloorResults:
    """Per run, per kind, per rate (msg/s): the figures."""

    idle_rate: int
    busy_rate: int
    runs: list[dict[str, dict[int, StepFigures]]] = field(default_factory=list)
    loop: str = "asyncio"  # the event loop of the steps that run on one

    def results(self) -> list[Result]:
        on = "" if self.loop == "asyncio" else f" on {self.loop}"
        out: list[Result] = []
        for kind in KINDS:
            for rate in (self.idle_rate, self.busy_rate):
                at = f"{kind}{on} at {rate:,}/s"
                figs = [run[kind][rate] for run in self.runs]
                out.append(_result(f"{at}: latency p50", "us", [1e6 * f.p(50) for f in figs]))
                out.append(_result(f"{at}: latency p99", "us", [1e6 * f.p(99) for f in figs]))
                out.append(
                    _result(f"{at}: CPU per step", "us", [1e6 * f.cpu_per_step for f in figs])
                )
        for label, counts, target in _FLOORS:
            what = _counts(counts)
            out.append(
                _result(
                    f"floor{on}{label}: idle latency along the path",
                    "ms",
                    [1e3 * _path_latency(run, self.idle_rate, counts) for run in self.runs],
                    target,
                    f"sum of the p50s at the idle rate: {what}",
                )
            )
            out.append(
                _result(
                    f"floor{on}{label}: CPU at one tick per ms",
                    "% of a core",
                    [100 * _tick_cpu(run, self.busy_rate, counts) * 1000 for run in self.runs],
                    "-",
                    f"one trip per tick: CPU per step at 1,000/s ({what}) x 1,000 ticks/s",
                )
            )
        return out


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)


def _path_latency(
    run: dict[str, dict[int, StepFigures]], rate: int, counts: dict[str, int]
) -> float:
    return sum(n * run[kind][rate].p(50) for kind, n in counts.items() if n)


def _tick_cpu(run: dict[str, dict[int, StepFigures]], rate: int, counts: dict[str, int]) -> float:
    return sum(n * run[kind][rate].cpu_per_step for kind, n in counts.items() if n)


def _result(name: str, unit: str, values: list[float], target: str = "-", note: str = "") -> Result:
    return Result(name, unit, target, values, note)


def run_floor_bench(
    workdir: Path,
    runs: int,
    seconds: float,
    idle_rate: int = 20,
    busy_rate: int = 1000,
    progress: Callable[[str], None] = lambda _m: None,
    loop: str = "asyncio",
) -> FloorResults:
    """Measure every kind of step at both rates, ``runs`` times, ``seconds`` each, the
    steps that wait on an event loop on ``loop`` (one of :data:`LOOPS`)."""
    if loop not in LOOPS:
        raise ValueError(f"unknown event loop {loop!r}: choose from {', '.join(LOOPS)}")
    results = FloorResults(idle_rate, busy_rate, loop=loop)
    with tempfile.TemporaryDirectory(prefix="rt-floor-", dir=workdir) as tmp:
        _measure(Path(tmp), results, runs, seconds, progress)
    return results


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a new event loop of kind ``loop`` (one of :data:`LOOPS`)."""
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


def _measure(
    work: Path,
    results: FloorResults,
    runs: int,
    seconds: float,
    progress: Callable[[str], None],
) -> None:
    idle_rate, busy_rate, loop = results.idle_rate, results.busy_rate, results.loop
    tls = _make_certs(work / "tls")
    for run in range(1, runs + 1):
        figures: dict[str, dict[int, StepFigures]] = {k: {} for k in KINDS}
        for rate in (idle_rate, busy_rate):
            figures["tls"][rate] = _tls_hop(tls, rate, seconds, loop)
            figures["inotify"][rate] = _inotify_wake(work, rate, seconds, loop)
            figures["sync"][rate] = _sync(work, rate, seconds)
            figures["thread"][rate] = run_on(loop, _thread_handoff(rate, seconds))
            progress(
                f"run {run}/{runs} on {loop} at {rate:,}/s: "
                + ", ".join(
                    f"{k} p50 {1e6 * figures[k][rate].p(50):.0f} us "
                    f"cpu {1e6 * figures[k][rate].cpu_per_step:.0f} us"
                    for k in KINDS
                )
            )
        results.runs.append(figures)


# -- certificates ----------------------------------------------------------------------


def _make_certs(directory: Path) -> TlsConfig:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = create_ca("floor")
    (directory / "ca.crt").write_bytes(cert_pem(ca_cert))
    for name in ("a", "b"):
        key, cert = issue_host_cert(ca_key, ca_cert, name, ["127.0.0.1"])
        (directory / f"{name}.crt").write_bytes(cert_pem(cert))
        (directory / f"{name}.key").write_bytes(key_pem(key))
        os.chmod(directory / f"{name}.key", 0o600)
    return TlsConfig(dir=str(directory))


# -- tls: a frame each way between two processes --------------------------------------


def _tls_hop(tls: TlsConfig, rate: int, seconds: float, loop: str) -> StepFigures:
    ctx = mp.get_context("spawn")
    queue: Any = ctx.Queue()
    echo = ctx.Process(target=_echo_main, args=(tls.dir, queue, loop), daemon=True)
    echo.start()
    try:
        port = queue.get(timeout=60)
        ping = ctx.Process(target=_ping_main, args=(tls.dir, port, rate, seconds, queue, loop))
        ping.start()
        rtts, cpu = queue.get(timeout=seconds + 60)
        ping.join(10)
    finally:
        echo.kill()
        echo.join(10)
    # a round trip is two one-way steps; its CPU: both processes' over both steps
    return StepFigures([r / 2 for r in rtts], cpu / (2 * max(1, len(rtts))))


def _echo_main(tls_dir: str, queue: Any, loop: str) -> None:
    run_on(loop, _echo(TlsConfig(dir=tls_dir), queue))


async def _echo(tls: TlsConfig, queue: Any) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        start: float | None = None
        while True:
            (length,) = _LEN.unpack(await reader.readexactly(_LEN.size))
            if length == _STOP:
                used = 0.0 if start is None else time.process_time() - start
                writer.write(_LEN.pack(8) + struct.pack("<d", used))
                await writer.drain()
                return
            body = await reader.readexactly(length)
            if start is None:
                start = time.process_time()
            writer.write(_LEN.pack(length) + body)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context(tls, "a"))
    queue.put(server.sockets[0].getsockname()[1])
    await asyncio.Event().wait()


def _ping_main(tls_dir: str, port: int, rate: int, seconds: float, queue: Any, loop: str) -> None:
    queue.put(run_on(loop, _ping(TlsConfig(dir=tls_dir), port, rate, seconds)))


async def _ping(tls: TlsConfig, port: int, rate: int, seconds: float) -> tuple[list[float], float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(tls, "b"))
    pad = b"x" * (FRAME_BYTES - _TS.size)
    rtts: list[float] = []
    count = max(1, int(rate * seconds))
    start_cpu = time.process_time()
    async for _ in _ticks(rate, count):
        sent = time.perf_counter_ns()
        writer.write(_LEN.pack(FRAME_BYTES) + _TS.pack(sent) + pad)
        (length,) = _LEN.unpack(await reader.readexactly(_LEN.size))
        await reader.readexactly(length)
        rtts.append((time.perf_counter_ns() - sent) / 1e9)
    cpu = time.process_time() - start_cpu - count * await _pacing_cpu(rate, seconds / 2)
    writer.write(_LEN.pack(_STOP))
    (length,) = _LEN.unpack(await reader.readexactly(_LEN.size))
    (echo_cpu,) = struct.unpack("<d", await reader.readexactly(length))
    writer.close()
    return rtts, cpu + echo_cpu


# -- inotify: a writer process wakes a reader process ----------------------------------


def _inotify_wake(work: Path, rate: int, seconds: float, loop: str) -> StepFigures:
    directory = work / f"watch-{rate}"
    directory.mkdir(exist_ok=True)
    path = directory / "log"
    path.write_bytes(b"")
    count = max(1, int(rate * seconds))
    ctx = mp.get_context("spawn")
    queue: Any = ctx.Queue()
    reader = ctx.Process(target=_follow_main, args=(str(path), count, queue, loop), daemon=True)
    reader.start()
    try:
        queue.get(timeout=60)  # watching
        _write_paced(path, rate, count)
        lags, cpu = queue.get(timeout=60)
    finally:
        reader.kill()
        reader.join(10)
    return StepFigures(lags, cpu / max(1, len(lags)))


def _write_paced(path: Path, rate: int, count: int) -> None:
    pad = b"x" * (FRAME_BYTES - _TS.size)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for _ in _ticks_blocking(rate, count):
            os.write(fd, _TS.pack(time.perf_counter_ns()) + pad)
    finally:
        os.close(fd)


def _follow_main(path: str, count: int, queue: Any, loop: str) -> None:
    queue.put(run_on(loop, _follow(Path(path), count, queue)))


async def _follow(path: Path, count: int, queue: Any) -> tuple[list[float], float]:
    lags: list[float] = []
    offset = 0
    fd = os.open(path, os.O_RDONLY)
    with AsyncDirectoryWatcher(path.parent) as watcher:
        queue.put("watching")
        start_cpu = time.process_time()
        while len(lags) < count:
            await watcher.wait(5.0)
            data = os.pread(fd, 1 << 20, offset)
            now = time.perf_counter_ns()
            whole = len(data) - len(data) % FRAME_BYTES
            for at in range(0, whole, FRAME_BYTES):
                (sent,) = _TS.unpack_from(data, at)
                lags.append((now - sent) / 1e9)
            offset += whole
        cpu = time.process_time() - start_cpu
    os.close(fd)
    return lags, cpu


# -- sync and thread: in this process ----------------------------------------------------


def _sync(work: Path, rate: int, seconds: float) -> StepFigures:
    path = work / f"sync-{rate}"
    count = max(1, int(min(rate, 200) * seconds))  # the disk's pace, not the rate, bounds it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    record = b"x" * FRAME_BYTES
    lags: list[float] = []
    cpu = 0.0
    try:
        for _ in _ticks_blocking(rate, count):
            os.write(fd, record)
            c0, t0 = time.process_time(), time.perf_counter()
            os.fdatasync(fd)
            lags.append(time.perf_counter() - t0)
            cpu += time.process_time() - c0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return StepFigures(lags, cpu / count)


async def _thread_handoff(rate: int, seconds: float) -> StepFigures:
    """A call handed to a worker thread and back; its CPU net of the pacing's own wake."""
    count = max(1, int(rate * seconds))
    lags: list[float] = []
    start_cpu = time.process_time()
    async for _ in _ticks(rate, count):
        t0 = time.perf_counter()
        await asyncio.to_thread(int)
        lags.append(time.perf_counter() - t0)
    cpu = (time.process_time() - start_cpu) / count
    return StepFigures(lags, max(0.0, cpu - await _pacing_cpu(rate, seconds / 2)))


async def _pacing_cpu(rate: int, seconds: float) -> float:
    """CPU seconds per wake of a loop paced at ``rate`` that does nothing else."""
    count = max(1, int(rate * seconds))
    start_cpu = time.process_time()
    async for _ in _ticks(rate, count):
        pass
    return (time.process_time() - start_cpu) / count


async def _ticks(rate: int, count: int) -> AsyncIterator[int]:
    """``count`` ticks at ``rate`` per second on the event loop (on the tick, not after
    the work of the last one)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(count):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))  # pacing
        yield i


def _ticks_blocking(rate: int, count: int) -> Iterator[int]:
    """:func:`_ticks` for a thread without an event loop."""
    start = time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))  # pacing
        yield i
