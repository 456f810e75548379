"""``memory``: RSS (``/proc/<pid>/status``) of each node's process (``rt node``) sampled while
``memory_messages`` messages pass through the stream."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rt_lab.bench.cluster.harness import (
    PUBLISHERS,
    Bench,
    ClusterBenchOptions,
    Progress,
)
from rt_lab.bench.stats import Result, rss_bytes

__all__ = ["Memory", "measure_memory", "memory_results"]


@dataclass(slots=True)
class Memory:
    start: dict[str, int]  # node -> RSS bytes before publishing
    end: dict[str, int]
    peak: dict[str, int]
    samples: int
    end_to_end: float  # msg/s, first publish -> all at the subscriber


def measure_memory(opts: ClusterBenchOptions, work: Path, progress: Progress) -> Memory:
    """Sequencer RSS while ``opts.memory_messages`` pass through the stream."""
    per_pub = max(1, opts.memory_messages // len(PUBLISHERS))
    rate = opts.memory_rate // len(PUBLISHERS)
    with Bench(opts, work, progress) as b:
        b.start()
        skip = b.warm_up()
        pids = b.pids("sequencer")
        start = {n: rss_bytes(p) for n, p in pids.items()}
        peak = dict(start)
        sub = b.subscriber(expected=skip + per_pub * len(PUBLISHERS), skip=skip)
        pubs = b.publishers(per_pub, rate=rate)
        samples = 0
        next_report = time.monotonic() + 10

        def sample() -> None:
            nonlocal samples, next_report
            for n, pid in pids.items():
                peak[n] = max(peak[n], rss_bytes(pid))
            samples += 1
            if time.monotonic() >= next_report:
                rss = ", ".join(f"{n} {rss_bytes(pid) / 1e6:.0f} MB" for n, pid in pids.items())
                progress(f"  memory: {sub.count:,} messages at the subscriber; RSS {rss}")
                next_report += 10

        b.wait_subscriber(sub, "memory", skip + per_pub * len(PUBLISHERS), sample)
        got = sub.finish()
        end = {n: rss_bytes(pid) for n, pid in pids.items()}
        first = min(child.finish()["first_ns"] for child in pubs)
    rate = per_pub * len(PUBLISHERS) / ((got["done_ns"] - first) / 1e9)
    return Memory(start, end, peak, samples, rate)


def memory_results(opts: ClusterBenchOptions, m: Memory | None) -> list[Result]:
    """The rows of the memory run (one without values if it failed)."""
    what = f"{opts.memory_messages / 1e6:g} million messages"
    if m is None:
        return [Result(f"sequencer RSS growth over {what}", "MB", "flat (<= 50)")]
    paced = f"{opts.memory_rate:,} msg/s" if opts.memory_rate else "full speed"
    e2e = Result(
        "end-to-end rate during the memory run",
        "msg/s",
        "-",
        [m.end_to_end],
        f"publishers paced at {paced} in total",
    )
    return [e2e] + [
        Result(
            f"{node} sequencer RSS growth over {what}",
            "MB",
            "flat (<= 50)",
            [(m.peak[node] - m.start[node]) / 1e6],
            f"start {m.start[node] / 1e6:.0f} MB, end {m.end[node] / 1e6:.0f} MB, "
            f"peak {m.peak[node] / 1e6:.0f} MB ({m.samples} samples)",
        )
        for node in sorted(m.start)
    ]
