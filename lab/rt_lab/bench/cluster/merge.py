"""``merge``: the sequencers alone. The same messages are published and copied into
every node's inputs before any node starts; then the nodes start, and the figure is the
messages over the time from the leader's first merge (the time its first merged file
was made, in that file's header) to every node's merged log holding all of them. A
leader merges at once once elected, faster than a status poll could say it was."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from rt_appliance.limits import MAX_FILE_HEADER_BYTES
from rt_appliance.log.format import decode_file_header
from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import Answer, NodeStatus
from rt_appliance.subscribe import Subscriber
from rt_lab.bench.cluster.harness import (
    PUBLISHERS,
    Bench,
    ClusterBenchOptions,
    Progress,
    highest,
)

__all__ = ["measure_merge"]


def measure_merge(opts: ClusterBenchOptions, work: Path, progress: Progress) -> float:
    """msg/s of the sequencers alone, merging inputs that every node already holds: the
    publishers write locally (no replication), their files are copied into every node's
    ``in/`` as a push server would have written them, then the nodes start."""
    opts = replace(opts, clients="daemons")  # the applications write, nothing replicates
    with Bench(opts, work, progress) as b:
        ends = _input_on_every_node(b, opts.messages)
        os.sync()  # the input on disk: the clock measures merging only
        for node in b.stream.node_names:
            b.stream.start_node(node)
        leader = b.wait_leader()
        done_ns = _merged_at(b, ends)
        seconds = (done_ns - _first_merge_ns(b.stream.merged_dir(leader))) / 1e9
    return 2 * opts.messages / seconds


def _first_merge_ns(merged: Path) -> int:
    """When the leader planned its first merge: the creation time in the header of the
    first merged file (wall clock, as the planner stamps it)."""
    first = list_files(merged)[0].path
    with open(first, "rb") as f:
        header = decode_file_header(f.read(MAX_FILE_HEADER_BYTES))
    if isinstance(header, str):
        raise RuntimeError(f"{first}: {header}")
    return header.created_ns


def _input_on_every_node(b: Bench, n: int) -> dict[str, int]:
    """Publish ``n`` messages from each publisher and copy them into every node's
    inputs (no node running); ``{input name: its end position}``."""
    s = b.stream
    for p in b.publishers(n):
        p.finish(timeout_s=600)
    sources = {host: s.publisher_dir(host, topics[0]) for host, topics in PUBLISHERS.items()}
    ends = {
        f"{t[0]}.{h}": int(Subscriber(sources[h]).end_position()) for h, t in PUBLISHERS.items()
    }
    for node in s.node_names:
        for host, topics in PUBLISHERS.items():
            replica = s.input_dir(node, host, topics[0])
            replica.mkdir(parents=True, exist_ok=True)
            for f in sorted(sources[host].glob("log.*")):  # a replica holds the files alone
                shutil.copyfile(f, replica / f.name)
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


def _merged_at(b: Bench, ends: Mapping[str, int]) -> int:
    """The wall clock (ns) when every node is seen to have merged everything."""
    changed_at, last = time.monotonic(), -1
    while True:
        b.check_daemons()
        status = b.poller.poll()
        if _merged(status, ends):
            return time.time_ns()
        seq = highest(status, "merged_seq")
        if seq != last:
            changed_at, last = time.monotonic(), seq
        elif time.monotonic() - changed_at > b.opts.stall_s:
            raise b.stalled(f"merge: no merge for {b.opts.stall_s:g}s at merged seq {seq}")
        time.sleep(0.05)
