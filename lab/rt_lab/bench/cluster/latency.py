"""``latency`` and ``stages``: both publishers publish at half the total rate each, every
millisecond one batch of what is due (the peers of ``rt bench peers`` are paced alike);
latency is the reader's clock when it reads a message minus the timestamp the publisher
put in the record, at the subscriber (``latency``) or at each stage of the stream at
once (``stages``)."""

from __future__ import annotations

import time
from pathlib import Path

from rt_lab.bench.cluster.harness import (
    LATENCY_TICK_S,
    PUBLISHERS,
    SUBSCRIBER,
    Bench,
    ClusterBenchOptions,
    Progress,
    cpu_seconds,
    latency_traffic,
    started,
)

__all__ = ["STAGES", "measure_latency", "measure_stages"]

STAGES = (  # (name, where a follower of that stage reads)
    ("a follower node's in/ (pub-1)", "in"),
    ("the leader's merged log", "leader"),
    ("a follower's merged log", "follower"),
    ("the subscriber's copy", "subscriber"),
)


def measure_latency(opts: ClusterBenchOptions, work: Path, progress: Progress) -> dict[str, float]:
    """Publish-to-subscriber latency (ms) at ``opts.latency_rate`` msg/s in total, and
    the CPU of the run as shares of one core: ``cpu_nodes`` (every process of the
    nodes), ``cpu_clients`` (the push and pull client daemons; 0 with the clients in
    process), ``cpu_apps`` (the publishing and subscribing applications)."""
    rate, count = latency_traffic(opts)
    with Bench(opts, work, progress) as b:
        skip = started(b)
        sub = b.subscriber(
            expected=skip + count * len(PUBLISHERS),
            skip=skip,
            latency=True,
            samples=opts.latency_samples,
        )
        daemons = b.stream.pids()
        nodes = {k: pid for k, pid in daemons.items() if not k.startswith(("push-c", "pull-c"))}
        clients = {k: pid for k, pid in daemons.items() if k not in nodes}
        before = {pid: cpu_seconds(pid) for pid in daemons.values()}
        started_at = time.monotonic()
        pubs = b.publishers(count, rate=rate, tick_s=LATENCY_TICK_S)
        b.wait_subscriber(sub, "latency", skip + count * len(PUBLISHERS))
        elapsed = time.monotonic() - started_at
        spent = {pid: cpu_seconds(pid) - t for pid, t in before.items()}
        got = sub.finish()
        apps = float(got["cpu_s"]) + sum(float(p.finish()["cpu_s"]) for p in pubs)
    out = {k: float(v) for k, v in got["latency_ms"].items()}
    out["cpu_nodes"] = sum(spent[pid] for pid in nodes.values()) / elapsed
    out["cpu_clients"] = sum(spent[pid] for pid in clients.values()) / elapsed
    out["cpu_apps"] = apps / elapsed
    return out


def measure_stages(
    opts: ClusterBenchOptions, work: Path, progress: Progress
) -> dict[str, dict[str, float]]:
    """Latency (ms) from publish to each stage of the stream at ``opts.latency_rate``:
    one follower process per stage, all reading at once."""
    rate, count = latency_traffic(opts)
    with Bench(opts, work, progress) as b:
        skip = started(b)
        places = _stage_places(b, skip, count)
        subs = {  # the subscriber's own copy: kept by that application (or rt pull-client)
            key: b.subscriber(
                first + n,
                first,
                latency=True,
                directory=None if key == "subscriber" else d,
                label=f"subscribe-{key}",
            )
            for key, (d, first, n) in places.items()
        }
        pubs = b.publishers(count, rate=rate, tick_s=LATENCY_TICK_S)
        final = places["subscriber"]
        b.wait_subscriber(subs["subscriber"], "stages", final[1] + final[2])
        got = {key: sub.finish() for key, sub in subs.items()}
        for p in pubs:
            p.finish()
    return {key: {k: float(v) for k, v in got[key]["latency_ms"].items()} for key in got}


def _stage_places(b: Bench, skip: int, count: int) -> dict[str, tuple[Path, int, int]]:
    """``{stage: (directory its follower reads, messages to skip, messages to time)}``."""
    leader = b.wait_leader()
    follower = next(n for n in b.stream.node_names if n != leader)
    host, topics = next(iter(PUBLISHERS.items()))
    merged = count * len(PUBLISHERS)
    return {
        "in": (b.stream.input_dir(follower, host, topics[0]), 1, count),
        "leader": (b.stream.merged_dir(leader), skip, merged),
        "follower": (b.stream.merged_dir(follower), skip, merged),
        "subscriber": (b.stream.subscriber_dir(SUBSCRIBER), skip, merged),
    }
