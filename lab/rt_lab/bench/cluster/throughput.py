"""``throughput``: both publishers as fast as they can (or paced); the messages over the
time from the first publish to the moment the subscriber has read all of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rt_lab.bench.cluster.harness import (
    PUBLISHERS,
    Bench,
    ClusterBenchOptions,
    Progress,
    cpu_seconds,
    highest,
)

__all__ = ["Throughput", "measure_throughput"]


@dataclass(slots=True)
class Throughput:
    end_to_end: float  # msg/s, first publish -> all at the subscriber
    publish: float  # msg/s, first publish -> last publish returned
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds, all hosts
    elections: int = 0  # raft terms begun after the first leader, during the run


def measure_throughput(opts: ClusterBenchOptions, work: Path, progress: Progress) -> Throughput:
    """Both publishers at full speed (or ``opts.throughput_rate`` in total); time until
    the subscriber has read everything."""
    n = opts.messages
    with Bench(opts, work, progress) as b:
        b.start()
        skip = b.warm_up()
        term_before = highest(b.poller.poll(), "term")
        sub = b.subscriber(expected=skip + 2 * n, skip=skip)
        daemons = b.stream.pids()
        cpu_before = {k: cpu_seconds(p) for k, p in daemons.items()}
        pubs = b.publishers(n, rate=opts.throughput_rate // len(PUBLISHERS))
        b.wait_subscriber(sub, "throughput", skip + 2 * n)
        got = sub.finish()
        cpu = _cpu_by_role(daemons, cpu_before)
        published = [p.finish() for p in pubs]
        elections = highest(b.poller.poll(), "term") - term_before
    first = min(p["first_ns"] for p in published)
    last = max(p["last_ns"] for p in published)
    seconds = (got["done_ns"] - first) / 1e9
    return Throughput(2 * n / seconds, 2 * n / ((last - first) / 1e9), seconds, cpu, elections)


def _cpu_by_role(daemons: Mapping[str, int], before: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each role's daemons (``<role>-<host>``: pid) took since ``before``."""
    cpu: dict[str, float] = {}
    for name, pid in daemons.items():
        role = name.rsplit("-", 2)[0]
        cpu[role] = cpu.get(role, 0.0) + cpu_seconds(pid) - before[name]
    return cpu
