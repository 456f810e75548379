"""``rt bench cluster``: the whole stream end to end, with the raft sequencer.

Each measurement starts a fresh stream on this machine (:class:`LocalStream`, real
daemons, real mutual TLS): three RT nodes on 127.0.0.1-3, each running ``rt
push-server``, ``rt sequencer`` and ``rt pull-server``; two publisher hosts (pub-1
topic ``trades``, pub-2 topic ``quotes``), each with its ``rt push-client``; one
subscriber host (sub-1) whose ``rt pull-client`` keeps a copy of the merged log.
The publishing and subscribing applications run as their own processes
(``python -m rt_appliance.bench.cluster_bench publish|subscribe JSON``), as they
would on their own hosts; the subscriber reads the copy with
:class:`~rt_appliance.subscribe.Subscriber`, following it (inotify).

Measurements, all with 100-byte payloads:

* ``throughput``: both publishers write ``messages`` each with ``publish_batch``
  (batches of 1,000) as fast as they can; the figure is the messages over the time
  from the first publish to the moment the subscriber has read all of them;
* ``merge``: the sequencers alone: the same messages are published and pushed to
  every node with the sequencers stopped; then the sequencers start, and the figure
  is the messages over the time from a leader being elected to every node's merged
  log holding all of them;
* ``failover``: under a paced publishing load, SIGKILL the leader's sequencer and
  time until another node leads and the committed and merged sequence pass where
  they were at the kill; the killed sequencer is restarted and caught up before the
  next kill. A run's figure is the median of its kills;
* ``latency``: both publishers publish single messages at half the total rate each;
  latency is the subscriber's clock when it reads a message minus the timestamp the
  publisher put in the record;
* ``memory``: RSS (``/proc/<pid>/status``) of each ``rt sequencer`` process sampled
  while ``memory_messages`` messages pass through the stream.

Status comes from the nodes' control channels (what ``rt status --json`` prints),
asked over connections kept open for the whole measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rt_appliance.bench.stats import Result
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import RTError
from rt_appliance.limits import DEFAULT_ROLL_BYTES
from rt_appliance.publish import Publisher
from rt_appliance.replicate.messages import FrameType, decode_control
from rt_appliance.replicate.session import Connection, connect
from rt_appliance.subscribe import Subscriber
from rt_appliance.testing.cluster import wait_until
from rt_appliance.testing.stream import LocalStream
from rt_appliance.transport.tls import client_context

__all__ = [
    "MEASUREMENTS",
    "ClusterBenchOptions",
    "ClusterReport",
    "describe_config",
    "run_cluster_bench",
    "verdicts",
]

MEASUREMENTS = ("throughput", "merge", "failover", "latency", "stages", "memory")
PUBLISHERS = {"pub-1": ["trades"], "pub-2": ["quotes"]}  # publisher host -> its topic
SUBSCRIBER = "sub-1"
NODES = 3
PAYLOAD_BYTES = 100
BATCH = 1000  # messages per publish_batch call at full speed
TICK_S = 0.005  # paced publishers write what is due every tick
STATUS_TIMEOUT_S = 2.0
RETRY_S = 0.5  # a node that could not be reached is not asked again sooner
LEADER_TIMEOUT_S = 60.0
_CHILD = (sys.executable, "-m", "rt_appliance.bench.cluster_bench")

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ClusterBenchOptions:
    """What ``rt bench cluster`` measures and how much."""

    workdir: Path
    runs: int = 3
    measure: tuple[str, ...] = MEASUREMENTS
    messages: int = 2_000_000  # per publisher, throughput and merge
    throughput_rate: int = 0  # msg/s in total for the throughput runs; 0: as fast as possible
    kills: int = 5  # per failover run
    failover_rate: int = 20_000  # msg/s in total while killing leaders
    latency_rate: int = 5_000  # msg/s in total
    latency_seconds: float = 10.0
    memory_messages: int = 10_000_000  # in total
    memory_rate: int = 50_000  # msg/s in total; 0: as fast as possible
    publisher_fsync: str = "never"
    publisher_roll_bytes: int = DEFAULT_ROLL_BYTES
    max_range_bytes: int | None = None  # sequencer.max_range_bytes; None: the default
    nice: int = 0  # niceness of the publishing and subscribing applications
    stall_s: float = 30.0  # no progress this long: the run stalled
    restart_s: float = 30.0  # a restarted sequencer must be back in step within this

    def overrides(self) -> dict[str, Any]:
        """The configuration keys set on top of LocalStream's (see ``describe_config``)."""
        extra: dict[str, Any] = {}
        if self.max_range_bytes is not None:
            extra["sequencer"] = {"max_range_bytes": self.max_range_bytes}
        return extra


class Stalled(RTError):
    """The stream stopped making progress; the message quotes status and logs."""


# -- asking the nodes -------------------------------------------------------------------


class StatusPoller:
    """Each node's status over its control channel, on connections kept open."""

    def __init__(self, config: StreamConfig, as_host: str = SUBSCRIBER) -> None:
        self.config, self.as_host = config, as_host
        self.context = client_context(config.tls, as_host)
        self.loop = asyncio.new_event_loop()
        self.conns: dict[str, Connection] = {}
        self.retry_at: dict[str, float] = {}  # no new connection to a node before this

    async def _connect(self, name: str) -> Connection:
        if time.monotonic() < self.retry_at.get(name, 0.0):
            raise RTError(f"{name} was unreachable a moment ago")
        self.retry_at[name] = time.monotonic() + RETRY_S
        node = self.config.node(name)
        opening = connect(
            node.host,
            self.config.ports.control,
            self.context,
            self.config,
            self.as_host,
            "status",
            name,
        )
        conn, _peer = await asyncio.wait_for(opening, STATUS_TIMEOUT_S)
        self.conns[name] = conn
        self.retry_at.pop(name, None)
        return conn

    async def _one(self, name: str) -> dict[str, Any] | None:
        try:
            conn = self.conns.get(name) or await self._connect(name)
            await conn.send(FrameType.STATUS, {})
            frame_type, body = await asyncio.wait_for(conn.receive(), STATUS_TIMEOUT_S)
            if frame_type != FrameType.STATE:
                raise RTError(f"{name} answered frame type {frame_type} to STATUS")
            answer: dict[str, Any] = decode_control(frame_type, body)
            return answer
        except (RTError, OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError):
            dropped = self.conns.pop(name, None)
            if dropped is not None:
                with contextlib.suppress(Exception):
                    await dropped.close()
            return None

    def poll(self, nodes: Iterable[str] | None = None) -> dict[str, dict[str, Any] | None]:
        """``{node: status or None (unreachable)}``."""
        names = [n.name for n in self.config.nodes] if nodes is None else list(nodes)

        async def everyone() -> list[dict[str, Any] | None]:
            return list(await asyncio.gather(*(self._one(n) for n in names)))

        return dict(zip(names, self.loop.run_until_complete(everyone()), strict=True))

    def close(self) -> None:
        async def close_all() -> None:
            for conn in self.conns.values():
                with contextlib.suppress(Exception):
                    await conn.close()

        self.loop.run_until_complete(close_all())
        self.conns.clear()
        self.loop.close()


def _leader(status: Mapping[str, dict[str, Any] | None]) -> str | None:
    """The node that says it leads, if exactly one does."""
    leaders = [n for n, s in status.items() if s is not None and s.get("role") == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def _seq(status: Mapping[str, dict[str, Any] | None], key: str) -> int:
    return max((int(s.get(key) or 0) for s in status.values() if s is not None), default=0)


def _describe_status(status: Mapping[str, dict[str, Any] | None]) -> str:
    parts = []
    for name, s in status.items():
        if s is None:
            parts.append(f"{name}: unreachable")
            continue
        lag = {k: v.get("lag_bytes") for k, v in (s.get("inputs") or {}).items()}
        parts.append(
            f"{name}: {s.get('role')} term {s.get('term')} leader {s.get('leader')} "
            f"commit_index {s.get('commit_index')} committed_seq {s.get('committed_seq')} "
            f"merged_seq {s.get('merged_seq')} halted {s.get('halted')} lag {lag}"
        )
    return "; ".join(parts)


# -- the stream and its applications ----------------------------------------------------


class _Child:
    """A publishing or subscribing application in its own process.

    It prints ``P <count>`` lines as it goes, ``READY`` once warmed up and one
    ``R <json>`` line with its result at the end.
    """

    def __init__(self, mode: str, args: Mapping[str, Any], log_path: Path) -> None:
        self.mode = mode
        self.count = 0
        self.changed_at = time.monotonic()
        self.ready = threading.Event()
        self.result: dict[str, Any] | None = None
        self.log_path = log_path
        with open(log_path, "ab") as err:
            self.proc = subprocess.Popen(
                [*_CHILD, mode, json.dumps(dict(args))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"child-{mode}")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("P "):
                self.count = int(line.split()[1])
                self.changed_at = time.monotonic()
            elif line.startswith("READY"):
                self.ready.set()
            elif line.startswith("R "):
                self.result = json.loads(line[2:])

    def done(self) -> bool:
        return self.proc.poll() is not None

    def go(self) -> None:
        """Let a publisher that is READY start publishing."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("GO\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait for the child to exit; its result, or an error with its stderr."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(timeout=5)
        if self.result is None:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise RTError(f"{self.mode} process exited {self.proc.returncode}: {tail}")
        return self.result

    def stop(self) -> None:
        """SIGTERM: a paced publisher stops, reports and exits."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class _Bench:
    """One fresh stream in ``work`` with its status poller and applications."""

    def __init__(self, opts: ClusterBenchOptions, work: Path, progress: Progress) -> None:
        self.opts, self.work, self.progress = opts, work, progress
        self.stream = LocalStream(work, NODES, PUBLISHERS, [SUBSCRIBER], extra=opts.overrides())
        self.poller = StatusPoller(self.stream.config)
        self.children: list[_Child] = []

    def __enter__(self) -> _Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.kill()
        self.poller.close()
        self.stream.stop()

    # -- the applications --

    def publishers(self, count: int, rate: int = 0, single: bool = False) -> list[_Child]:
        """A publishing application on each publisher host: ``count`` messages each (0:
        until stopped), at ``rate`` msg/s each (0: as fast as it can), single calls or
        batches. They open their Publishers, then start together."""
        children = []
        for host, topics in PUBLISHERS.items():
            args = {
                "root": str(self.stream.publisher_root(host)),
                "topic": topics[0],
                "host": host,
                "count": count,
                "rate": rate,
                "single": single,
                "fsync": self.opts.publisher_fsync,
                "roll_bytes": self.opts.publisher_roll_bytes,
                "nice": self.opts.nice,
            }
            log_path = self.work / "logs" / f"app-publish-{host}.log"
            children.append(_Child("publish", args, log_path))
        self.children.extend(children)
        for child in children:
            if not child.ready.wait(LEADER_TIMEOUT_S):
                raise RTError(f"a publisher did not start: {child.log_path.read_text()[-1500:]}")
        for child in children:
            child.go()
        return children

    def subscriber(
        self,
        expected: int,
        skip: int,
        latency: bool = False,
        directory: Path | None = None,
        label: str = "subscribe",
    ) -> _Child:
        """The subscribing application on sub-1, reading its copy of the merged log (or,
        to time a stage of the stream, following ``directory`` on a node)."""
        args = {
            "dir": str(directory or self.stream.subscriber_dir(SUBSCRIBER)),
            "expected": expected,
            "skip": skip,
            "latency": latency,
            "nice": self.opts.nice,
        }
        child = _Child("subscribe", args, self.work / "logs" / f"app-{label}.log")
        self.children.append(child)
        child.ready.wait(LEADER_TIMEOUT_S)
        if not child.ready.is_set():
            raise self.stalled("the subscriber did not read the warm-up messages")
        return child

    def warm_up(self) -> int:
        """One message from each publisher through the whole stream; returns how many."""
        for host, topics in PUBLISHERS.items():
            with Publisher(self.stream.publisher_root(host), topics[0], host) as pub:
                pub.publish(b"warm-up")
        copy = self.stream.subscriber_dir(SUBSCRIBER)

        def arrived() -> bool:
            self.check_daemons()
            try:
                return sum(len(b) for b in Subscriber(copy).read_batches()) >= len(PUBLISHERS)
            except (RTError, FileNotFoundError):
                return False

        try:
            wait_until(arrived, LEADER_TIMEOUT_S, "the warm-up messages at the subscriber", 0.05)
        except TimeoutError as exc:
            raise self.stalled(str(exc)) from exc
        return len(PUBLISHERS)

    # -- the stream --

    def start(self) -> None:
        self.stream.start()
        self.wait_leader()

    def wait_leader(self, timeout_s: float = LEADER_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_daemons()
            leader = _leader(self.poller.poll())
            if leader is not None:
                return leader
            time.sleep(0.05)
        raise self.stalled(f"no leader within {timeout_s:g}s")

    def check_daemons(self, allowed: Iterable[str] = ()) -> None:
        exited = {k: v for k, v in self.stream.exited().items() if k not in set(allowed)}
        if exited:
            name = next(iter(exited))
            tail = self.stream.daemons[name].log()[-2000:]
            raise RTError(f"{name} exited with status {exited[name]}; its log ends:\n{tail}")

    def pids(self, role: str) -> dict[str, int]:
        """``{node: pid}`` of the running daemons of ``role`` on the nodes."""
        prefix = f"{role}-"
        return {k[len(prefix) :]: v for k, v in self.stream.pids().items() if k.startswith(prefix)}

    def stalled(self, what: str) -> Stalled:
        """An error quoting the nodes' status and the end of the sequencers' logs."""
        try:
            status = _describe_status(self.poller.poll())
        except Exception as exc:  # the report must not hide the stall
            status = f"status unavailable: {exc}"
        logs = "\n".join(
            f"--- {name} (last lines)\n" + "\n".join(d.log().splitlines()[-12:])
            for name, d in self.stream.daemons.items()
            if name.startswith("sequencer-")
        )
        sizes = ", ".join(
            f"{name} {_input_size(d):,}"
            for name, d in [
                *self.stream.merged_dirs().items(),
                (SUBSCRIBER, self.stream.subscriber_dir(SUBSCRIBER)),
            ]
        )
        return Stalled(
            f"{what}\nstatus: {status}\nmerged log bytes: {sizes}\n"
            f"logs in {self.work / 'logs'}\n{logs}"
        )

    def wait_subscriber(
        self, sub: _Child, what: str, expected: int, tick: Callable[[], None] | None = None
    ) -> None:
        """Until the subscriber has read ``expected`` messages (``tick()`` every 0.5 s
        meanwhile); :class:`Stalled` if it reads nothing new for ``opts.stall_s``."""
        while not sub.done():
            self.check_daemons()
            if tick is not None:
                tick()
            quiet = time.monotonic() - sub.changed_at
            if quiet > self.opts.stall_s:
                what = (
                    f"{what}: the subscriber read nothing new for {quiet:.0f}s "
                    f"({sub.count:,} of {expected:,} messages)"
                )
                if _all_merged(self.poller.poll()):
                    what += (
                        f"; every node reports all input merged: {expected - sub.count:,} "
                        "messages are missing from the merged log"
                    )
                raise self.stalled(what)
            time.sleep(0.5)


def _all_merged(status: Mapping[str, dict[str, Any] | None]) -> bool:
    """Whether every node answers, has written all it committed and holds no unmerged input."""
    for st in status.values():
        if st is None or st.get("merged_seq") != st.get("committed_seq"):
            return False
        if any((i or {}).get("lag_bytes") for i in (st.get("inputs") or {}).values()):
            return False
    return True


# -- measurements ----------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_of(pid: int) -> int:
    """Resident set size of process ``pid`` in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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
    with _Bench(opts, work, progress) as b:
        b.start()
        skip = b.warm_up()
        term_before = _seq(b.poller.poll(), "term")
        sub = b.subscriber(expected=skip + 2 * n, skip=skip)
        daemons = b.stream.pids()
        cpu_before = {k: _cpu_seconds(p) for k, p in daemons.items()}
        pubs = b.publishers(n, rate=opts.throughput_rate // len(PUBLISHERS))
        b.wait_subscriber(sub, "throughput", skip + 2 * n)
        got = sub.finish()
        cpu: dict[str, float] = {}
        for name, pid in daemons.items():
            role = name.rsplit("-", 2)[0]
            cpu[role] = cpu.get(role, 0.0) + _cpu_seconds(pid) - cpu_before[name]
        published = [p.finish() for p in pubs]
        elections = _seq(b.poller.poll(), "term") - term_before
    first = min(p["first_ns"] for p in published)
    last = max(p["last_ns"] for p in published)
    seconds = (got["done_ns"] - first) / 1e9
    return Throughput(2 * n / seconds, 2 * n / ((last - first) / 1e9), seconds, cpu, elections)


def _input_size(directory: Path) -> int:
    try:
        return sum(p.stat().st_size for p in directory.glob("log.*"))
    except FileNotFoundError:
        return 0


def measure_merge(opts: ClusterBenchOptions, work: Path, progress: Progress) -> float:
    """msg/s of the sequencers alone, merging inputs that every node already holds."""
    n = opts.messages
    with _Bench(opts, work, progress) as b:
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
        sizes = {h: _input_size(d) for h, d in sources.items()}

        def pushed() -> bool:
            b.check_daemons()
            return all(
                _input_size(s.input_dir(node, h, PUBLISHERS[h][0])) >= sizes[h]
                for node in s.node_names
                for h in PUBLISHERS
            )

        wait_until(pushed, 600, "every node to hold both publishers' input", 0.1)
        os.sync()  # the input on disk: the clock measures merging only
        for node in s.node_names:
            s.start_node(node, roles="sequencer")
        b.wait_leader()
        elected = time.monotonic()
        changed_at, last = elected, -1

        def merged(status: Mapping[str, dict[str, Any] | None]) -> bool:
            for st in status.values():
                if st is None or st.get("merged_seq") != st.get("committed_seq"):
                    return False
                inputs = st.get("inputs") or {}
                if any((inputs.get(name) or {}).get("merged") != end for name, end in ends.items()):
                    return False
            return True

        while True:
            b.check_daemons()
            status = b.poller.poll()
            if merged(status):
                return 2 * n / (time.monotonic() - elected)
            seq = _seq(status, "merged_seq")
            if seq != last:
                changed_at, last = time.monotonic(), seq
            elif time.monotonic() - changed_at > opts.stall_s:
                raise b.stalled(f"merge: no merge for {opts.stall_s:g}s at merged seq {seq}")
            time.sleep(0.05)


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
        with _Bench(opts, work / f"stream-{out.streams}", progress) as b:
            b.start()
            rate = max(1, opts.failover_rate // len(PUBLISHERS))
            pubs = b.publishers(0, rate=rate)
            _wait_merging(b, seconds=2.0)
            while len(out.kills) < opts.kills:
                kill = _kill_leader(b, len(out.kills) + 1)
                out.kills.append(kill)
                progress(
                    f"  kill {len(out.kills)}/{opts.kills}: {kill.killed}'s sequencer; "
                    f"{kill.new_leader} leads after {kill.elected_s:.2f}s, merges after "
                    f"{kill.failover_s:.2f}s"
                )
                restarted = time.monotonic()
                b.stream.start_node(kill.killed, roles="sequencer")
                if not _wait_caught_up(b, kill.killed, opts.restart_s):
                    note = (
                        f"the restarted sequencer of {kill.killed} was not back in step "
                        f"{opts.restart_s:g}s after its restart (merged log of "
                        f"{_input_size(b.stream.merged_dir(kill.killed)) / 1e6:.0f} MB)"
                    )
                    progress(f"  {note}; going on in a fresh stream")
                    out.notes.append(str(b.stalled(note)))
                    _keep_logs(work / f"stream-{out.streams}", opts.workdir, "restart", progress)
                    break
                kill.back_s = time.monotonic() - restarted
                _wait_merging(b, seconds=1.0)
            for p in pubs:
                p.stop()
            for p in pubs:
                p.finish()
    return out


def _kill_leader(b: _Bench, k: int) -> Kill:
    """SIGKILL the leader's sequencer; time until another leader merges past the kill."""
    status = b.poller.poll()
    leader = _leader(status)
    if leader is None:
        leader = b.wait_leader()
        status = b.poller.poll()
    before = max(_seq(status, "committed_seq"), _seq(status, "merged_seq"))
    others = [n for n in b.stream.node_names if n != leader]
    killed_at = time.monotonic()
    b.stream.kill_node(leader, signal.SIGKILL, roles="sequencer")
    elected: float | None = None
    while True:
        b.check_daemons(allowed=[f"sequencer-{leader}"])
        now_status = b.poller.poll(others)
        now = time.monotonic()
        new = _leader(now_status)
        if new is not None:
            if elected is None:
                elected = now - killed_at
            st = now_status[new] or {}
            if min(int(st.get("committed_seq") or 0), int(st.get("merged_seq") or 0)) > before:
                return Kill(leader, elected, now - killed_at, new)
        if now - killed_at > b.opts.stall_s:
            raise b.stalled(
                f"failover {k}: {b.opts.stall_s:g}s after killing {leader}'s sequencer "
                f"(seq {before} then) merging has not resumed"
            )
        time.sleep(0.02)


def _wait_merging(b: _Bench, seconds: float) -> None:
    """Until the committed sequence has advanced for ``seconds`` under one leader."""
    start_seq: int | None = None
    start = time.monotonic()
    while True:
        b.check_daemons()
        status = b.poller.poll()
        seq = _seq(status, "committed_seq")
        if start_seq is None or _leader(status) is None:
            start_seq, start = seq, time.monotonic()
        elif time.monotonic() - start >= seconds and seq > start_seq:
            return
        if time.monotonic() - start > b.opts.stall_s:
            raise b.stalled(f"merging did not advance for {b.opts.stall_s:g}s")
        time.sleep(0.1)


def _wait_caught_up(b: _Bench, node: str, timeout_s: float) -> bool:
    """Whether restarted ``node`` merges what the leader had committed when first asked,
    within ``timeout_s``."""
    target: int | None = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        b.check_daemons()
        status = b.poller.poll()
        leader = _leader(status)
        if target is None and leader is not None:
            target = int((status[leader] or {}).get("committed_seq") or 0)
        mine = status.get(node)
        if target is not None and mine is not None and int(mine.get("merged_seq") or 0) >= target:
            return True
        time.sleep(0.1)
    return False


def measure_latency(opts: ClusterBenchOptions, work: Path, progress: Progress) -> dict[str, float]:
    """Publish-to-subscriber latency (ms) at ``opts.latency_rate`` msg/s in total."""
    rate, count = _latency_traffic(opts)
    with _Bench(opts, work, progress) as b:
        skip = _started(b)
        sub = b.subscriber(expected=skip + count * len(PUBLISHERS), skip=skip, latency=True)
        pubs = b.publishers(count, rate=rate, single=True)
        b.wait_subscriber(sub, "latency", skip + count * len(PUBLISHERS))
        got = sub.finish()
        for p in pubs:
            p.finish()
    return {k: float(v) for k, v in got["latency_ms"].items()}


STAGES = (  # (name, where a follower of that stage reads)
    ("a follower node's in/ (pub-1)", "in"),
    ("the leader's merged log", "leader"),
    ("a follower's merged log", "follower"),
    ("the subscriber's copy", "subscriber"),
)


def measure_stages(
    opts: ClusterBenchOptions, work: Path, progress: Progress
) -> dict[str, dict[str, float]]:
    """Latency (ms) from publish to each stage of the stream at ``opts.latency_rate``:
    one follower process per stage, all reading at once."""
    rate, count = _latency_traffic(opts)
    with _Bench(opts, work, progress) as b:
        skip = _started(b)
        leader = b.wait_leader()
        follower = next(n for n in b.stream.node_names if n != leader)
        host, topics = next(iter(PUBLISHERS.items()))
        places = {
            "in": (b.stream.input_dir(follower, host, topics[0]), 1, count),
            "leader": (b.stream.merged_dir(leader), skip, count * len(PUBLISHERS)),
            "follower": (b.stream.merged_dir(follower), skip, count * len(PUBLISHERS)),
            "subscriber": (b.stream.subscriber_dir(SUBSCRIBER), skip, count * len(PUBLISHERS)),
        }
        subs = {
            key: b.subscriber(first + n, first, latency=True, directory=d, label=f"subscribe-{key}")
            for key, (d, first, n) in places.items()
        }
        pubs = b.publishers(count, rate=rate, single=True)
        final = places["subscriber"]
        b.wait_subscriber(subs["subscriber"], "stages", final[1] + final[2])
        got = {key: sub.finish() for key, sub in subs.items()}
        for p in pubs:
            p.finish()
    return {key: {k: float(v) for k, v in got[key]["latency_ms"].items()} for key in got}


def _latency_traffic(opts: ClusterBenchOptions) -> tuple[int, int]:
    """(msg/s, messages) per publisher for the latency and stages runs."""
    rate = max(1, opts.latency_rate // len(PUBLISHERS))
    return rate, int(rate * opts.latency_seconds)


def _started(b: _Bench) -> int:
    """Start the stream, pass the warm-up messages and settle; returns how many."""
    b.start()
    skip = b.warm_up()
    _settle(b)
    return skip


def _settle(b: _Bench) -> None:
    """A moment for the stream to settle after the warm-up (elections, connections)."""
    time.sleep(1.0)
    b.check_daemons()


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
    with _Bench(opts, work, progress) as b:
        b.start()
        skip = b.warm_up()
        pids = b.pids("sequencer")
        start = {n: rss_of(p) for n, p in pids.items()}
        peak = dict(start)
        sub = b.subscriber(expected=skip + per_pub * len(PUBLISHERS), skip=skip)
        pubs = b.publishers(per_pub, rate=rate)
        samples = 0
        next_report = time.monotonic() + 10

        def sample() -> None:
            nonlocal samples, next_report
            for n, pid in pids.items():
                peak[n] = max(peak[n], rss_of(pid))
            samples += 1
            if time.monotonic() >= next_report:
                rss = ", ".join(f"{n} {rss_of(pid) / 1e6:.0f} MB" for n, pid in pids.items())
                progress(f"  memory: {sub.count:,} messages at the subscriber; RSS {rss}")
                next_report += 10

        b.wait_subscriber(sub, "memory", skip + per_pub * len(PUBLISHERS), sample)
        got = sub.finish()
        end = {n: rss_of(pid) for n, pid in pids.items()}
        first = min(child.finish()["first_ns"] for child in pubs)
    rate = per_pub * len(PUBLISHERS) / ((got["done_ns"] - first) / 1e9)
    return Memory(start, end, peak, samples, rate)


# -- the suite -------------------------------------------------------------------------


@dataclass(slots=True)
class ClusterReport:
    """What ``rt bench cluster`` found."""

    results: list[Result]  # a result without values: every run of it stalled or failed
    problems: list[str]  # stalls and failures, with status and log excerpts
    loads: list[float]  # the machine's 1-minute load average as each run started


class _Suite:
    """Runs the chosen measurements and gathers their results."""

    def __init__(self, opts: ClusterBenchOptions, progress: Progress) -> None:
        self.opts, self.progress = opts, progress
        self.problems: list[str] = []
        self.loads: list[float] = []
        self.attempts: dict[str, int] = {}
        rate = f"{opts.latency_rate:,} msg/s"
        self.e2e = Result(
            "end-to-end throughput, 2 publishers -> subscriber", "msg/s", ">= 500,000"
        )
        self.pub = Result("publish rate during that run (2 publishers)", "msg/s", "-")
        self.elections = Result("new raft terms (elections) during that run", "terms", "-")
        self.merge = Result("sequencer-only merge rate (input already on every node)", "msg/s", "-")
        self.failover = Result(
            "failover: kill -9 the leader's sequencer -> merging again", "s", "<= 2"
        )
        self.elected = Result("failover: kill -9 -> another leader named", "s", "-")
        self.restart = Result("failover: restarted sequencer back in step", "s", "-")
        self.p50 = Result(f"publish-to-subscriber latency p50 at {rate}", "ms", "<= 1")
        self.p99 = Result(f"publish-to-subscriber latency p99 at {rate}", "ms", "<= 5")
        self.worst = Result(f"publish-to-subscriber latency max at {rate}", "ms", "-")
        self.stages = {
            key: (
                Result(f"stage latency p50 at {rate}: publish -> {name}", "ms", "-"),
                Result(f"stage latency p99 at {rate}: publish -> {name}", "ms", "-"),
            )
            for name, key in STAGES
        }

    def attempt(self, name: str, run: int, fn: Callable[[Path, int], None]) -> None:
        """``fn(work, run)`` in a fresh work directory; a failure becomes a problem."""
        self.attempts[name] = self.attempts.get(name, 0) + 1
        load = os.getloadavg()[0]
        self.loads.append(load)
        self.progress(f"run {run}/{self.opts.runs}: {name} (load average {load:.1f})")
        work = Path(tempfile.mkdtemp(prefix=f"cluster-{name}-", dir=self.opts.workdir))
        try:
            fn(work, run)
        except (RTError, TimeoutError, OSError) as exc:
            self.problems.append(f"{name}, run {run}: {exc}")
            self.progress(f"  {name} failed: {str(exc).splitlines()[0]}")
            _keep_logs(work, self.opts.workdir, f"{name}-run{run}", self.progress)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            os.sync()  # the next run starts without this one's dirty pages

    def latency(self, work: Path, run: int) -> None:
        got = measure_latency(self.opts, work, self.progress)
        self.p50.values.append(got["p50"])
        self.p99.values.append(got["p99"])
        self.worst.values.append(got["max"])
        self.progress(
            f"  p50 {got['p50']:.2f} ms, p99 {got['p99']:.2f} ms, max {got['max']:.1f} ms"
        )

    def stage_latency(self, work: Path, run: int) -> None:
        got = measure_stages(self.opts, work, self.progress)
        for key, (p50, p99) in self.stages.items():
            p50.values.append(got[key]["p50"])
            p99.values.append(got[key]["p99"])
        self.progress(
            "  p50/p99 ms: "
            + ", ".join(f"{key} {got[key]['p50']:.1f}/{got[key]['p99']:.1f}" for key in got)
        )

    def throughput(self, work: Path, run: int) -> None:
        got = measure_throughput(self.opts, work, self.progress)
        self.e2e.values.append(got.end_to_end)
        self.pub.values.append(got.publish)
        self.elections.values.append(got.elections)
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in sorted(got.cpu.items()))
        self.progress(
            f"  {got.end_to_end:,.0f} msg/s end to end ({got.seconds:.1f} s), "
            f"published at {got.publish:,.0f} msg/s, {got.elections} new raft terms; "
            f"CPU seconds: {cpu}"
        )

    def merged(self, work: Path, run: int) -> None:
        rate = measure_merge(self.opts, work, self.progress)
        self.merge.values.append(rate)
        self.progress(f"  {rate:,.0f} msg/s merged")

    def failovers(self, work: Path, run: int) -> None:
        got = measure_failover(self.opts, work, self.progress)
        self.failover.values.append(statistics.median(k.failover_s for k in got.kills))
        self.elected.values.append(statistics.median(k.elected_s for k in got.kills))
        back = [k.back_s for k in got.kills if k.back_s is not None]
        if back:
            self.restart.values.append(statistics.median(back))
        self.problems.extend(f"failover, run {run}: {note}" for note in got.notes)

    def memory(self) -> list[Result]:
        holder: list[Memory] = []
        self.attempt(
            "memory",
            1,
            lambda work, _: holder.append(measure_memory(self.opts, work, self.progress)),
        )
        what = f"{self.opts.memory_messages / 1e6:g} million messages"
        if not holder:
            return [Result(f"sequencer RSS growth over {what}", "MB", "flat (<= 50)")]
        m = holder[0]
        paced = f"{self.opts.memory_rate:,} msg/s" if self.opts.memory_rate else "full speed"
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

    def run(self) -> ClusterReport:
        o = self.opts
        steps = [  # latency first: a throughput run leaves the disk writing back
            ("latency", self.latency),
            ("stages", self.stage_latency),
            ("throughput", self.throughput),
            ("merge", self.merged),
            ("failover", self.failovers),
        ]
        for run in range(1, o.runs + 1):
            for name, fn in steps:
                if name in o.measure:
                    self.attempt(name, run, fn)
        self.e2e.note = f"{o.messages:,} messages per publisher, batches of {BATCH:,}"
        if o.throughput_rate:
            self.e2e.note += f", paced at {o.throughput_rate:,} msg/s in total"
            self.e2e.target = "-"  # the target is for publishers at full speed
        self.pub.note = f"publisher fsync={o.publisher_fsync}"
        self.elections.note = "from the start of publishing to the end (0: one leader)"
        self.merge.note = f"{2 * o.messages:,} messages, leader elected -> merged on 3 nodes"
        self.failover.note = f"median of {o.kills} kills per run, under {o.failover_rate:,} msg/s"
        self.elected.note = self.failover.note
        self.restart.note = "restart -> merged what the leader had committed"
        for r in (self.p50, self.p99, self.worst):
            r.note = f"{o.latency_seconds:g} s of single publish calls per run"
        stage_results = [r for pair in self.stages.values() for r in pair]
        for r in stage_results:
            r.note = "a follower process on each stage at once, single publish calls"
        measured_by = [
            (self.e2e, "throughput"),
            (self.pub, "throughput"),
            (self.elections, "throughput"),
            (self.merge, "merge"),
            (self.failover, "failover"),
            (self.elected, "failover"),
            (self.restart, "failover"),
            (self.p50, "latency"),
            (self.p99, "latency"),
            (self.worst, "latency"),
            *((r, "stages") for r in stage_results),
        ]
        results = []
        for r, name in measured_by:
            if name not in o.measure:
                continue
            failed = self.attempts.get(name, 0) - len(r.values)
            if failed:
                r.note += f"; {failed} of {self.attempts[name]} runs stalled or failed"
            results.append(r)
        if "memory" in o.measure and o.memory_messages:
            results.extend(self.memory())
        return ClusterReport(results, self.problems, self.loads)


def run_cluster_bench(opts: ClusterBenchOptions, progress: Progress) -> ClusterReport:
    """Every chosen measurement, ``opts.runs`` times (memory once).

    A run that stalls or fails is left out of the medians and described in the
    problems (with the nodes' status and the end of the sequencers' logs).
    """
    return _Suite(opts, progress).run()


def _keep_logs(work: Path, workdir: Path, label: str, progress: Progress) -> None:
    """Copy the daemon logs of a stream in ``work`` next to it, for the report."""
    for logs in [work / "logs", *sorted(work.glob("*/logs"))]:
        if logs.is_dir():
            kept = workdir / f"cluster-bench-logs-{label}-{time.strftime('%H%M%S')}"
            if logs.parent != work:
                kept = kept.with_name(f"{kept.name}-{logs.parent.name}")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(logs, kept)
            progress(f"  logs kept in {kept}")


# -- the verdict -----------------------------------------------------------------------


_TARGET = re.compile(r"^(<=|>=)\s*([\d,.]+)")


def verdicts(results: list[Result]) -> str:
    """One line per result with a numeric target: its median and whether it meets it."""
    lines = []
    for r in results:
        target = r.target.replace("flat (", "").rstrip(")")
        m = _TARGET.match(target)
        if m is None:
            continue
        if not r.values:
            lines.append(f"- {r.name}: **not measured** (every run stalled or failed)")
            continue
        bound = float(m.group(2).replace(",", ""))
        met = r.median <= bound if m.group(1) == "<=" else r.median >= bound
        shown = f"{r.median:,.0f}" if r.median >= 100 else f"{r.median:,.2f}"
        lines.append(
            f"- {r.name}: {shown} {r.unit}, target {r.target}: **{'met' if met else 'not met'}**"
        )
    return "\n".join(lines)


# -- the applications, in child processes ----------------------------------------------


def _publish_child(args: dict[str, Any]) -> dict[str, Any]:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args["nice"]:
        os.nice(args["nice"])
    payload = b"x" * PAYLOAD_BYTES
    count, rate = int(args["count"]), int(args["rate"])
    published = 0
    with Publisher(
        args["root"],
        args["topic"],
        args["host"],
        fsync=args["fsync"],
        roll_bytes=int(args["roll_bytes"]),
    ) as pub:
        _say("READY")
        sys.stdin.readline()  # GO: every publisher is ready
        first = time.time_ns()
        start = time.monotonic()
        if rate == 0:
            batch = [payload] * BATCH
            while published < count and not stop.is_set():
                n = min(BATCH, count - published)
                pub.publish_batch(batch if n == BATCH else batch[:n])
                published += n
                if published % (100 * BATCH) == 0:
                    _say(f"P {published}")
        elif args["single"]:
            publish = pub.publish
            while (count == 0 or published < count) and not stop.is_set():
                delay = start + published / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # pacing the publish rate
                publish(payload)
                published += 1
        else:
            while (count == 0 or published < count) and not stop.is_set():
                due = int((time.monotonic() - start) * rate) + 1
                if count:
                    due = min(due, count)
                if due > published:
                    pub.publish_batch([payload] * (due - published))
                    published = due
                    _say(f"P {published}")
                stop.wait(TICK_S)  # pacing the publish rate
        last = time.time_ns()
        pub.flush()
    return {"first_ns": first, "last_ns": last, "published": published}


_STDOUT = threading.Lock()


def _say(line: str) -> None:
    """One whole line to the parent (the subscriber's report thread writes too)."""
    with _STDOUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _subscribe_child(args: dict[str, Any]) -> dict[str, Any]:
    if args["nice"]:
        os.nice(args["nice"])
    expected, skip = int(args["expected"]), int(args["skip"])
    latencies: list[int] = []
    seen = 0
    done_ns = first_ns = 0

    def report() -> None:  # the count every 0.5 s, also while the reader waits
        shown = -1
        while True:
            time.sleep(0.5)
            if seen != shown:
                shown = seen
                _say(f"P {shown}")

    threading.Thread(target=report, daemon=True, name="report").start()
    for batch in Subscriber(args["dir"]).read_batches(follow=True, max_messages=8192):
        now = time.time_ns()
        n = len(batch)
        if seen < skip:
            take = max(0, n - (skip - seen))
            timestamps = batch.timestamps_ns[n - take :]
        else:
            take, timestamps = n, batch.timestamps_ns
        before = seen
        seen += n
        if before < skip <= seen:
            _say("READY")
        if take:
            first_ns = first_ns or now
            if args["latency"]:
                latencies.extend(now - t for t in timestamps)
        if seen >= expected:
            done_ns = now
            break
    out: dict[str, Any] = {"count": seen, "first_ns": first_ns, "done_ns": done_ns}
    if args["latency"]:
        ordered = sorted(latencies)
        out["latency_ms"] = {
            "p50": statistics.median(ordered) / 1e6,
            "p99": ordered[int(0.99 * (len(ordered) - 1))] / 1e6,
            "max": ordered[-1] / 1e6,
            "samples": len(ordered),
        }
    return out


def _main(argv: list[str]) -> None:
    mode, args = argv[0], json.loads(argv[1])
    if mode == "publish":
        result = _publish_child(args)
    elif mode == "subscribe":
        result = _subscribe_child(args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    _say("R " + json.dumps(result))


def describe_config(opts: ClusterBenchOptions) -> str:
    """The settings the stream ran with, for the report."""
    items = [
        f"publishers fsync={opts.publisher_fsync}, "
        f"roll_bytes={opts.publisher_roll_bytes >> 20} MiB",
        "sequencer.max_range_bytes="
        + (f"{opts.max_range_bytes >> 10} KiB" if opts.max_range_bytes else "1 MiB (default)"),
        "every other key at its default as LocalStream writes it "
        "(replication.fsync=batch, reconnects from 50 ms)",
    ]
    if opts.nice:
        items.append(f"publishing and subscribing applications at nice {opts.nice}")
    return "; ".join(items)


if __name__ == "__main__":
    _main(sys.argv[1:])
