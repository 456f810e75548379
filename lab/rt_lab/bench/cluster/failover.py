"""``failover``: under a paced publishing load, SIGKILL the leader's sequencer and time
until another node leads and the committed and merged sequence pass where they were at
the kill; the killed sequencer is restarted and caught up before the next kill."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.errors import RTError
from rt_appliance.nodestatus import NodeStatus, leader_of
from rt_lab.bench.cluster.harness import (
    PUBLISHERS,
    Bench,
    ClusterBenchOptions,
    Progress,
    highest,
    input_size,
    keep_logs,
)

__all__ = ["FailoverRun", "Kill", "measure_failover"]


@dataclass(slots=True)
class Kill:
    killed: str
    elected_s: float  # kill -> another node leads
    failover_s: float  # kill -> another node leads and has committed and merged past the kill
    new_leader: str
    back_s: float | None = None  # restart -> the restarted sequencer caught up (None: not)


@dataclass(slots=True)
class FailoverRun:
    kills: list[Kill] = field(default_factory=list)
    streams: int = 0  # streams used: a fresh one when a restarted sequencer does not come back
    notes: list[str] = field(default_factory=list)


def measure_failover(opts: ClusterBenchOptions, work: Path, progress: Progress) -> FailoverRun:
    """SIGKILL the leader's sequencer ``opts.kills`` times under a paced publishing load.

    After each kill the killed sequencer is restarted and must catch up (within
    ``opts.restart_s``) before the next kill; if it does not, that is noted and the
    remaining kills go on in a fresh stream.
    """
    out = FailoverRun()
    while len(out.kills) < opts.kills:
        out.streams += 1
        if out.streams > opts.kills + 2:
            raise RTError("failover: too many fresh streams; " + "; ".join(out.notes))
        with Bench(opts, work / f"stream-{out.streams}", progress) as b:
            b.start()
            rate = max(1, opts.failover_rate // len(PUBLISHERS))
            pubs = b.publishers(0, rate=rate)
            wait_merging(b, seconds=2.0)
            _kills_in_stream(b, out, work)
            for p in pubs:
                p.stop()
            for p in pubs:
                p.finish()
    return out


def _kills_in_stream(b: Bench, out: FailoverRun, work: Path) -> None:
    """Kill and restart leaders in ``b`` until ``opts.kills`` are done or a restarted
    sequencer does not come back (noted in ``out``)."""
    opts, progress = b.opts, b.progress
    while len(out.kills) < opts.kills:
        kill = kill_leader(b, len(out.kills) + 1)
        out.kills.append(kill)
        progress(
            f"  kill {len(out.kills)}/{opts.kills}: {kill.killed}'s sequencer; "
            f"{kill.new_leader} leads after {kill.elected_s:.2f}s, merges after "
            f"{kill.failover_s:.2f}s"
        )
        restarted = time.monotonic()
        b.stream.start_node(kill.killed)
        if not wait_caught_up(b, kill.killed, opts.restart_s):
            note = (
                f"the restarted sequencer of {kill.killed} was not back in step "
                f"{opts.restart_s:g}s after its restart (merged log of "
                f"{input_size(b.stream.merged_dir(kill.killed)) / 1e6:.0f} MB)"
            )
            progress(f"  {note}; going on in a fresh stream")
            out.notes.append(str(b.stalled(note)))
            keep_logs(work / f"stream-{out.streams}", opts.workdir, "restart", progress)
            return
        kill.back_s = time.monotonic() - restarted
        wait_merging(b, seconds=1.0)


def kill_leader(b: Bench, k: int) -> Kill:
    """SIGKILL the leader's sequencer; time until another leader merges past the kill."""
    status = b.poller.poll()
    leader = leader_of(status)
    if leader is None:
        leader = b.wait_leader()
        status = b.poller.poll()
    before = max(highest(status, "committed_seq"), highest(status, "merged_seq"))
    others = [n for n in b.stream.node_names if n != leader]
    killed_at = time.monotonic()
    b.stream.kill_node(leader, signal.SIGKILL)
    elected: float | None = None
    while True:
        b.check_daemons(allowed=[f"sequencer-{leader}"])
        now_status = b.poller.poll(others)
        now = time.monotonic()
        new = leader_of(now_status)
        if new is not None:
            if elected is None:
                elected = now - killed_at
            st = now_status.get(new)
            if isinstance(st, NodeStatus) and min(st.committed_seq, st.merged_seq) > before:
                return Kill(leader, elected, now - killed_at, new)
        if now - killed_at > b.opts.stall_s:
            raise b.stalled(
                f"failover {k}: {b.opts.stall_s:g}s after killing {leader}'s sequencer "
                f"(seq {before} then) merging has not resumed"
            )
        time.sleep(0.02)


def wait_merging(b: Bench, seconds: float) -> None:
    """Until the committed sequence has advanced for ``seconds`` under one leader."""
    start_seq: int | None = None
    start = time.monotonic()
    while True:
        b.check_daemons()
        status = b.poller.poll()
        seq = highest(status, "committed_seq")
        if start_seq is None or leader_of(status) is None:
            start_seq, start = seq, time.monotonic()
        elif time.monotonic() - start >= seconds and seq > start_seq:
            return
        if time.monotonic() - start > b.opts.stall_s:
            raise b.stalled(f"merging did not advance for {b.opts.stall_s:g}s")
        time.sleep(0.1)


def wait_caught_up(b: Bench, node: str, timeout_s: float) -> bool:
    """Whether restarted ``node`` merges what the leader had committed when first asked,
    within ``timeout_s``."""
    target: int | None = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        b.check_daemons()
        status = b.poller.poll()
        leader = leader_of(status)
        if target is None and leader is not None:
            found = status.get(leader)
            target = found.committed_seq if isinstance(found, NodeStatus) else 0
        mine = status.get(node)
        if target is not None and isinstance(mine, NodeStatus) and mine.merged_seq >= target:
            return True
        time.sleep(0.1)
    return False
