"""``merge``: the sequencers alone. The same messages are published and pushed to every
node with the sequencers stopped; then the sequencers start, and the figure is the
messages over the time from a leader being elected to every node's merged log holding
all of them."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from rt_appliance.nodestatus import Answer, NodeStatus
from rt_appliance.subscribe import Subscriber
from rt_lab.bench.cluster.harness import (
    PUBLISHERS,
    Bench,
    ClusterBenchOptions,
    Progress,
    highest,
    input_size,
)
from rt_lab.testing.cluster import wait_until

__all__ = ["measure_merge"]


def measure_merge(opts: ClusterBenchOptions, work: Path, progress: Progress) -> float:
    """msg/s of the sequencers alone, merging inputs that every node already holds (the
    roles as daemons of their own: the push servers fill the inputs, then the sequencers
    start)."""
    opts = replace(opts, layout="daemons", clients="daemons")
    with Bench(opts, work, progress) as b:
        ends = _input_on_every_node(b, opts.messages)
        os.sync()  # the input on disk: the clock measures merging only
        for node in b.stream.node_names:
            b.stream.start_node(node, roles="sequencer")
        b.wait_leader()
        seconds = _time_merging(b, ends)
    return 2 * opts.messages / seconds


def _input_on_every_node(b: Bench, n: int) -> dict[str, int]:
    """Publish ``n`` messages from each publisher and wait until every node holds them
    (no sequencer running); ``{input name: its end position}``."""
    s = b.stream
    for node in s.node_names:
        s.start_node(node, roles=["push-server", "pull-server"])
    for host in PUBLISHERS:
        s.publisher_daemon(host).start()
    for p in b.publishers(n):
        p.finish(timeout_s=600)
    sources = {host: s.publisher_dir(host, topics[0]) for host, topics in PUBLISHERS.items()}
    ends = {
        f"{t[0]}.{h}": int(Subscriber(sources[h]).end_position()) for h, t in PUBLISHERS.items()
    }
    sizes = {h: input_size(d) for h, d in sources.items()}

    def pushed() -> bool:
        b.check_daemons()
        return all(
            input_size(s.input_dir(node, h, PUBLISHERS[h][0])) >= sizes[h]
            for node in s.node_names
            for h in PUBLISHERS
        )

    wait_until(pushed, 600, "every node to hold both publishers' input", 0.1)
    return ends


def _merged(status: Mapping[str, Answer], ends: Mapping[str, int]) -> bool:
    """Whether every node has merged and written each input up to its end."""
    for st in status.values():
        if not isinstance(st, NodeStatus) or st.merged_seq != st.committed_seq:
            return False
        for name, end in ends.items():
            got = st.inputs.get(name)
            if got is None or got.merged != end:
                return False
    return True


def _time_merging(b: Bench, ends: Mapping[str, int]) -> float:
    """Seconds from now (a leader elected) until every node has merged everything."""
    elected = time.monotonic()
    changed_at, last = elected, -1
    while True:
        b.check_daemons()
        status = b.poller.poll()
        if _merged(status, ends):
            return time.monotonic() - elected
        seq = highest(status, "merged_seq")
        if seq != last:
            changed_at, last = time.monotonic(), seq
        elif time.monotonic() - changed_at > b.opts.stall_s:
            raise b.stalled(f"merge: no merge for {b.opts.stall_s:g}s at merged seq {seq}")
        time.sleep(0.05)
