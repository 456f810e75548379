"""``rt bench replicate``: push replication throughput, catch-up, latency and memory.

Runs real daemons (3 push servers on 127.0.0.1-3 and a push client) with real
mutual TLS in a temporary work directory, as the tests do.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rt_appliance.config import load_config
from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.publish import Publisher
from rt_appliance.subscribe import Subscriber
from rt_lab.bench.stats import Result, percentile
from rt_lab.testing import server_alone
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config
from rt_lab.testing.stream import LocalStream

__all__ = ["run_replicate_bench"]

NODES = ["rt-1", "rt-2", "rt-3"]
_PAYLOAD = b"x" * 100
LARGE_RECORD_FRAMES = 12  # the stated bound: RSS growth of a replication daemon, in frames


class _Stream:
    """A 3-node stream with push servers running, and a push client to start."""

    def __init__(self, work: Path, **replication: object) -> None:
        self.path = write_local_config(
            work, extra={"replication": {"delete_acked": False, **replication}}
        )
        self.config = load_config(self.path)
        self.work = work
        self.root = self.config.data_dir_of(self.config.publisher("pub-1")) / "pub"
        self.daemons = [self._push_server(n) for n in NODES]

    def _push_server(self, node: str) -> Daemon:
        """The node's push server alone: this bench measures replication only."""
        argv = server_alone.command("push", self.path, node)
        return Daemon(f"push-server-{node}", [], self.work / "logs", program=argv).start()

    def _daemon(self, kind: str, flag: str, name: str) -> Daemon:
        args = [kind, "--config", str(self.path), flag, name, "--metrics-port", "0"]
        return Daemon(f"{kind}-{name}", args, self.work / "logs").start()

    def servers_listening(self) -> bool:
        """Whether every push server has logged that it listens."""
        return all(
            "listening on" in d.log() for d in self.daemons if d.name.startswith("push-server")
        )

    def start_client(self) -> Daemon:
        client = self._daemon("push-client", "--host", "pub-1")
        self.daemons.append(client)
        return client

    def replica(self, node: str) -> Path:
        return self.config.data_dir_of(self.config.node(node)) / "in" / "trades.pub-1"

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.stop()


def _size(directory: Path) -> int:
    try:
        return sum(p.stat().st_size for p in directory.glob("log.*"))
    except FileNotFoundError:
        return 0


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def catch_up(
    work: Path, backlog_bytes: int, sample_memory: bool = False, fsync: str = "batch"
) -> tuple[float, dict[str, int]]:
    """Seconds for 3 nodes to receive a ``backlog_bytes`` backlog; peak RSS growth per daemon."""
    stream = _Stream(work, fsync=fsync)
    try:
        with Publisher(stream.root, "trades", "pub-1", fsync="never") as pub:
            for _ in range(max(1, backlog_bytes // (128 * 1000))):
                pub.publish_batch([_PAYLOAD] * 1000)
        total = _size(stream.root / "trades.pub-1")
        os.sync()  # the backlog on disk, so the clock measures replication only
        wait_until(stream.servers_listening, 30, "the push servers to listen")
        start_rss = {d.name: _rss_bytes(d.proc.pid) for d in stream.daemons if d.proc}
        client = stream.start_client()
        start = time.perf_counter()
        peak: dict[str, int] = {}

        def done() -> bool:
            if sample_memory:
                for d in stream.daemons:
                    if d.proc is not None:
                        peak[d.name] = max(peak.get(d.name, 0), _rss_bytes(d.proc.pid))
            return all(_size(stream.replica(n)) >= total for n in NODES)

        wait_until(done, 600, "catch-up", interval_s=0.01)
        elapsed = time.perf_counter() - start
        client_start = _rss_bytes(client.proc.pid) if client.proc else 0
        growth = {name: peak[name] - start_rss.get(name, client_start) for name in peak}
        return elapsed, growth
    finally:
        stream.stop()


def latency(work: Path, rate: int, seconds: float, fsync: str = "batch") -> list[float]:
    """Publish-to-replica latencies (ms) at ``rate`` msg/s, read on node rt-2 by a follower."""
    os.sync()  # start without the previous run's dirty pages being written back meanwhile
    stream = _Stream(work, fsync=fsync)
    samples: list[float] = []
    try:
        stream.start_client()
        replica = stream.replica("rt-2")
        with Publisher(stream.root, "trades", "pub-1", fsync="never") as pub:
            pub.publish(b"warm-up")
            wait_until(lambda: _size(replica) > 0, 30, "the first message on rt-2")
            count = int(rate * seconds)
            stop = threading.Event()
            reader = threading.Thread(
                target=_follow, args=(replica, count + 1, samples, stop), daemon=True
            )
            reader.start()
            start = time.monotonic()
            for i in range(count):
                if (delay := start + i / rate - time.monotonic()) > 0:
                    time.sleep(delay)  # pacing the publish rate
                pub.publish(_PAYLOAD)
            reader.join(timeout=30)
            stop.set()
    finally:
        stream.stop()
    return samples


def _follow(directory: Path, count: int, samples: list[float], stop: threading.Event) -> None:
    for seen, message in enumerate(Subscriber(directory).read(follow=True), start=1):
        now = time.time_ns()
        if seen > 1:  # the warm-up message waited for the connection
            samples.append((now - message.timestamp_ns) / 1e6)
        if seen >= count or stop.is_set():
            return


def large_records_memory(
    work: Path, records: int, record_bytes: int = MAX_PAYLOAD_BYTES
) -> tuple[float, dict[str, int], dict[str, int]]:
    """Move ``records`` payloads of ``record_bytes`` through a whole 3-node stream (push,
    merge, pull to a subscriber host); returns the seconds it took, and each replication
    daemon's baseline RSS and peak RSS growth meanwhile ({role: bytes}, the largest over
    that role's daemons)."""
    stream = LocalStream(work, nodes=3, extra={"replication": {"delete_acked": True}})
    # the node processes (rt node, keyed as their unit: sequencer-<node>) and the clients
    roles = ("push-client", "sequencer", "pull-client")
    try:
        stream.start()
        stream.wait_leader()
        copy = stream.subscriber_dir("sub-1")
        with Publisher(stream.publisher_root("pub-1"), "trades", "pub-1", fsync="never") as pub:
            pub.publish(b"warm-up")
            wait_until(lambda: _size(copy) > 0, 60, "the warm-up message at the subscriber")
            pids = {
                name: d.proc.pid
                for name, d in stream.daemons.items()
                if d.proc is not None and name.startswith(roles)
            }
            base = {name: _rss_bytes(pid) for name, pid in pids.items()}
            peak = dict(base)
            payload = os.urandom(record_bytes)
            start = time.perf_counter()
            for _ in range(records):
                pub.publish(payload)
        target = _size(stream.publisher_dir("pub-1", "trades")) - 4096

        def done() -> bool:
            for name, pid in pids.items():
                peak[name] = max(peak[name], _rss_bytes(pid))
            return _size(copy) >= target

        wait_until(done, 900, "every large record at the subscriber", interval_s=0.01)
        elapsed = time.perf_counter() - start
    finally:
        stream.stop()
    label = {"sequencer": "node"}  # rt node: push server, sequencer and pull server
    baseline = {label.get(r, r): max(v for n, v in base.items() if n.startswith(r)) for r in roles}
    growth = {
        label.get(r, r): max(peak[n] - base[n] for n in pids if n.startswith(r)) for r in roles
    }
    return elapsed, baseline, growth


def run_replicate_bench(
    workdir: Path,
    runs: int,
    backlog_bytes: int,
    memory_bytes: int,
    progress: Callable[[str], None],
    fsync: str = "batch",
    large_records: int = 0,
) -> list[Result]:
    """Every replication figure; ``fsync`` is the servers' ``replication.fsync``;
    ``large_records``: also move that many records of MAX_PAYLOAD_BYTES end to end."""
    throughput = Result("push throughput, 1 publisher dir to 3 nodes, aggregate", "MB/s", ">= 300")
    catchup = Result(
        f"catch-up of a {backlog_bytes / 2**30:.2g} GiB backlog per node", "s", "<= 5 (1 GiB)"
    )
    p50 = Result("publish-to-replica latency p50 at 5,000 msg/s", "ms", "-")
    p99 = Result("publish-to-replica latency p99 at 5,000 msg/s", "ms", "<= 2")
    for result in (throughput, catchup, p50, p99):
        result.note = f"replication.fsync={fsync}"
    for run in range(1, runs + 1):
        work = Path(tempfile.mkdtemp(dir=workdir))
        try:  # latency first: a catch-up leaves the disk busy writing gigabytes back
            progress(f"run {run}/{runs}: latency")
            lat = latency(work / "l", 5000, 10, fsync)
            p50.values.append(percentile(lat, 50))
            p99.values.append(percentile(lat, 99))
            progress(f"run {run}/{runs}: catch-up")
            seconds, _ = catch_up(work / "c", backlog_bytes, fsync=fsync)
            catchup.values.append(seconds)
            throughput.values.append(3 * backlog_bytes / seconds / 1e6)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            os.sync()
    results = [throughput, catchup, p50, p99]
    if memory_bytes:
        progress(f"memory: moving {memory_bytes / 1e9:.1f} GB to 3 nodes")
        work = Path(tempfile.mkdtemp(dir=workdir))
        try:
            _, growth = catch_up(work / "m", memory_bytes, sample_memory=True, fsync=fsync)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        gb = f"{memory_bytes / 1e9:.1f} GB"
        for name, grew in sorted(growth.items()):
            results.append(Result(f"{name} RSS growth moving {gb}", "MB", "flat", [grew / 1e6]))
    if large_records:
        results += _large_results(workdir, large_records, progress)
    return results


def _large_results(workdir: Path, records: int, progress: Callable[[str], None]) -> list[Result]:
    """RSS of each replication daemon moving ``records`` records of MAX_PAYLOAD_BYTES."""
    mib = MAX_PAYLOAD_BYTES >> 20
    progress(f"memory: {records} records of {mib} MiB through push, merge and pull")
    work = Path(tempfile.mkdtemp(dir=workdir))
    try:
        seconds, baseline, growth = large_records_memory(work / "big", records)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frame = 4 << 20  # replication.max_frame_bytes, default
    bound = f"<= {LARGE_RECORD_FRAMES} frames ({LARGE_RECORD_FRAMES * frame / 1e6:.0f} MB)"
    results = [
        Result(
            f"{records} x {mib} MiB records, publish to subscriber copy (3 nodes)",
            "MB/s",
            "-",
            [records * MAX_PAYLOAD_BYTES / seconds / 1e6],
        )
    ]
    for role in sorted(growth):
        result = Result(
            f"{role} RSS growth moving {mib} MiB records", "MB", bound, [growth[role] / 1e6]
        )
        result.note = f"baseline RSS {baseline[role] / 1e6:.0f} MB; 4 MiB frames"
        results.append(result)
    return results
