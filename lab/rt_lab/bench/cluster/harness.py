"""What every measurement of ``rt bench cluster`` runs on: a fresh stream, its
applications in processes of their own, and the nodes' status.

:class:`Bench` is one fresh :class:`~rt_lab.testing.stream.LocalStream` in a
work directory with a :class:`~rt_appliance.nodestatus.StatusPoller` (connections
kept open for the whole measurement) and the publishing and subscribing
applications (:class:`Child`, :mod:`rt_lab.bench.cluster.children`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rt_appliance.config.model import ReplicationConfig
from rt_appliance.errors import RTError
from rt_appliance.limits import DEFAULT_ROLL_BYTES
from rt_appliance.nodestatus import Answer, NodeStatus, StatusPoller, leader_of
from rt_appliance.publish import Publisher
from rt_appliance.subscribe import Subscriber
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream

__all__ = [
    "BATCH",
    "MEASUREMENTS",
    "PUBLISHERS",
    "SUBSCRIBER",
    "Bench",
    "Child",
    "ClusterBenchOptions",
    "Progress",
    "Stalled",
    "cpu_seconds",
    "describe_config",
    "highest",
    "input_size",
    "keep_logs",
    "latency_traffic",
    "started",
]

MEASUREMENTS = ("throughput", "merge", "failover", "latency", "stages", "trace", "memory")
PUBLISHERS = {"pub-1": ["trades"], "pub-2": ["quotes"]}  # publisher host -> its topic
SUBSCRIBER = "sub-1"
NODES = 3
PAYLOAD_BYTES = 100
BATCH = 1000  # messages per publish_batch call at full speed
TICK_S = 0.005  # paced publishers write what is due every tick
LATENCY_TICK_S = 0.001  # ... in the latency runs: every millisecond, as the peers are paced
STATUS_TIMEOUT_S = 2.0
RETRY_S = 0.5  # a node that could not be reached is not asked again sooner
LEADER_TIMEOUT_S = 60.0
STACK_DUMP_WAIT_S = 1.0  # for a child that hangs to write its threads' stacks
LOG_TAIL_CHARS = 6000  # of a failed child's log, in the error
CHILD = (sys.executable, "-m", "rt_lab.bench.cluster.children")
REPLICATION_FSYNC_DEFAULT: str = ReplicationConfig.model_fields["fsync"].default

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
    idle_rate: int = 20  # msg/s in total of the trace's idle run
    quiet_s: float = 10.0  # the trace's run with no traffic, before the traced traffic
    memory_messages: int = 10_000_000  # in total
    memory_rate: int = 50_000  # msg/s in total; 0: as fast as possible
    publisher_fsync: str = "never"
    publisher_roll_bytes: int = DEFAULT_ROLL_BYTES
    max_range_bytes: int | None = None  # sequencer.max_range_bytes; None: the default
    replication_fsync: str | None = None  # replication.fsync; None: the default
    nice: int = 0  # niceness of the publishing and subscribing applications
    stall_s: float = 30.0  # no progress this long: the run stalled
    restart_s: float = 30.0  # a restarted sequencer must be back in step within this
    latency_samples: Path | None = None  # every latency of the latency runs, appended here
    # "in-process": the applications' own Publisher(replicate=) and Subscriber(pull=), as a
    # Python application runs by default; "daemons": rt push-client and rt pull-client
    clients: str = "in-process"

    @property
    def in_process(self) -> bool:
        return self.clients == "in-process"

    def overrides(self) -> dict[str, Any]:
        """The configuration keys set on top of LocalStream's (see ``describe_config``)."""
        extra: dict[str, Any] = {}
        if self.max_range_bytes is not None:
            extra["sequencer"] = {"max_range_bytes": self.max_range_bytes}
        if self.replication_fsync is not None:
            extra["replication"] = {"fsync": self.replication_fsync}
        return extra


def describe_config(opts: ClusterBenchOptions) -> str:
    """The settings the stream ran with, its durability included, for the report."""
    replication = opts.replication_fsync or f"{REPLICATION_FSYNC_DEFAULT} (default)"
    items = [
        f"publishers fsync={opts.publisher_fsync}, "
        f"roll_bytes={opts.publisher_roll_bytes >> 20} MiB",
        f"replication.fsync={replication} (push servers, the sequencers' inputs, "
        "the pull client's copy)",
        "raft journal always synced before a node answers or sends a raft message "
        "(whatever replication.fsync)",
        "sequencer.max_range_bytes="
        + (f"{opts.max_range_bytes >> 10} KiB" if opts.max_range_bytes else "1 MiB (default)"),
        "every other key at its default as LocalStream writes it (reconnects from 50 ms)",
    ]
    items.append("each node one process (rt node)")
    if opts.in_process:
        items.append("clients in the applications: Publisher(replicate=...), Subscriber(pull=...)")
    else:
        items.append("clients as daemons: rt push-client, rt pull-client")
    if opts.nice:
        items.append(f"publishing and subscribing applications at nice {opts.nice}")
    return "; ".join(items)


class Stalled(RTError):
    """The stream stopped making progress; the message quotes status and logs."""


# -- the nodes' status ------------------------------------------------------------------


def highest(status: Mapping[str, Answer], key: str) -> int:
    """The highest ``key`` (a number of :class:`NodeStatus`) among the nodes that answered."""
    return max(
        (int(getattr(s, key)) for s in status.values() if isinstance(s, NodeStatus)), default=0
    )


def describe_status(status: Mapping[str, Answer]) -> str:
    """One line of every node's status, for a report of a stall."""
    parts = []
    for name, s in status.items():
        if not isinstance(s, NodeStatus):
            parts.append(f"{name}: unreachable")
            continue
        lag = {k: v.lag_bytes for k, v in s.inputs.items()}
        parts.append(
            f"{name}: {s.role} term {s.term} leader {s.leader} "
            f"commit_index {s.commit_index} committed_seq {s.committed_seq} "
            f"merged_seq {s.merged_seq} halted {s.halted} lag {lag}"
        )
    return "; ".join(parts)


def all_merged(status: Mapping[str, Answer]) -> bool:
    """Whether every node answers, has written all it committed and holds no unmerged input."""
    return all(isinstance(s, NodeStatus) and s.all_merged for s in status.values())


# -- processes and files ----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def input_size(directory: Path) -> int:
    """Bytes of the log files in ``directory`` (0 if it does not exist yet)."""
    try:
        return sum(p.stat().st_size for p in directory.glob("log.*"))
    except FileNotFoundError:
        return 0


def keep_logs(work: Path, workdir: Path, label: str, progress: Progress) -> None:
    """Copy the daemon logs of a stream in ``work`` next to it, for the report."""
    for logs in [work / "logs", *sorted(work.glob("*/logs"))]:
        if logs.is_dir():
            kept = workdir / f"cluster-bench-logs-{label}-{time.strftime('%H%M%S')}"
            if logs.parent != work:
                kept = kept.with_name(f"{kept.name}-{logs.parent.name}")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(logs, kept)
            progress(f"  logs kept in {kept}")


# -- the applications -------------------------------------------------------------------


class Child:
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
        log_path.parent.mkdir(parents=True, exist_ok=True)  # before any daemon made it
        with open(log_path, "ab") as err:
            self.proc = subprocess.Popen(
                [*CHILD, mode, json.dumps(dict(args))],
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
            self._dump_stacks()
            self.kill()
        self._reader.join(timeout=5)
        if self.result is None:
            tail = self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            raise RTError(f"{self.mode} process exited {self.proc.returncode}: {tail}")
        return self.result

    def _dump_stacks(self) -> None:
        """Have a child that hangs write every thread's stack to its log (SIGUSR1)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGUSR1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STACK_DUMP_WAIT_S)

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


# -- the stream -------------------------------------------------------------------------


class Bench:
    """One fresh stream in ``work`` with its status poller and applications."""

    def __init__(self, opts: ClusterBenchOptions, work: Path, progress: Progress) -> None:
        self.opts, self.work, self.progress = opts, work, progress
        self.stream = LocalStream(
            work,
            NODES,
            PUBLISHERS,
            [SUBSCRIBER],
            extra=opts.overrides(),
        )
        self.poller = StatusPoller(self.stream.config, SUBSCRIBER, STATUS_TIMEOUT_S, RETRY_S)
        self.children: list[Child] = []

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.kill()
        self.poller.close()
        self.stream.stop()

    # -- the applications --

    def publishers(
        self, count: int, rate: int = 0, single: bool = False, tick_s: float = TICK_S
    ) -> list[Child]:
        """A publishing application on each publisher host: ``count`` messages each (0:
        until stopped), at ``rate`` msg/s each (0: as fast as it can), single calls or
        batches of what is due every ``tick_s``. They open their Publishers, then start
        together."""
        children = []
        for host, topics in PUBLISHERS.items():
            args = {
                "root": str(self.stream.publisher_root(host)),
                "topic": topics[0],
                "host": host,
                "count": count,
                "rate": rate,
                "single": single,
                "tick_s": tick_s,
                "fsync": self.opts.publisher_fsync,
                "roll_bytes": self.opts.publisher_roll_bytes,
                "nice": self.opts.nice,
                "replicate": str(self.stream.config_path) if self.opts.in_process else None,
            }
            log_path = self.work / "logs" / f"app-publish-{host}.log"
            children.append(Child("publish", args, log_path))
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
        samples: Path | None = None,
    ) -> Child:
        """The subscribing application on sub-1, reading its copy of the merged log (or,
        to time a stage of the stream, following ``directory`` on a node). With the
        clients in process it keeps the copy itself."""
        pulls = directory is None and self.opts.in_process
        args = {
            "dir": str(directory or self.stream.subscriber_dir(SUBSCRIBER)),
            "pull": str(self.stream.config_path) if pulls else None,
            "host": SUBSCRIBER,
            "expected": expected,
            "skip": skip,
            "latency": latency,
            "samples": None if samples is None else str(samples),
            "nice": self.opts.nice,
        }
        child = Child("subscribe", args, self.work / "logs" / f"app-{label}.log")
        self.children.append(child)
        child.ready.wait(LEADER_TIMEOUT_S)
        if not child.ready.is_set():
            raise self.stalled("the subscriber did not read the warm-up messages")
        return child

    def warm_up(self) -> int:
        """One message from each publisher through the whole stream (with the clients in
        process: to every node's merged log, the subscriber pulls them when it starts);
        returns how many."""
        replicate = self.stream.config_path if self.opts.in_process else None
        for host, topics in PUBLISHERS.items():
            root = self.stream.publisher_root(host)
            with Publisher(root, topics[0], host, replicate=replicate) as pub:
                pub.publish(b"warm-up")
                if replicate is not None and not pub.wait_acknowledged(
                    nodes=len(self.stream.node_names) // 2 + 1, timeout_s=LEADER_TIMEOUT_S
                ):
                    raise self.stalled(f"no majority acknowledged {host}'s warm-up message")
        copy = self.stream.subscriber_dir(SUBSCRIBER)
        if replicate is not None:
            copy = self.stream.merged_dir(self.stream.node_names[-1])

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
        daemons = not self.opts.in_process
        self.stream.start(push_clients=daemons, pull_clients=daemons)
        self.wait_leader()

    def wait_leader(self, timeout_s: float = LEADER_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_daemons()
            leader = leader_of(self.poller.poll())
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
            status = describe_status(self.poller.poll())
        except Exception as exc:  # the report must not hide the stall
            status = f"status unavailable: {exc}"
        return Stalled(
            f"{what}\nstatus: {status}\nmerged log bytes: {self._merged_sizes()}\n"
            f"logs in {self.work / 'logs'}\n{self._sequencer_log_tails()}"
        )

    def _merged_sizes(self) -> str:
        copies = [
            *self.stream.merged_dirs().items(),
            (SUBSCRIBER, self.stream.subscriber_dir(SUBSCRIBER)),
        ]
        return ", ".join(f"{name} {input_size(d):,}" for name, d in copies)

    def _sequencer_log_tails(self) -> str:
        return "\n".join(
            f"--- {name} (last lines)\n" + "\n".join(d.log().splitlines()[-12:])
            for name, d in self.stream.daemons.items()
            if name.startswith("sequencer-")
        )

    def wait_subscriber(
        self, sub: Child, what: str, expected: int, tick: Callable[[], None] | None = None
    ) -> None:
        """Until the subscriber has read ``expected`` messages (``tick()`` every 0.5 s
        meanwhile); :class:`Stalled` if it reads nothing new for ``opts.stall_s``."""
        while not sub.done():
            self.check_daemons()
            if tick is not None:
                tick()
            quiet = time.monotonic() - sub.changed_at
            if quiet > self.opts.stall_s:
                raise self.stalled(self._quiet_subscriber(sub, what, expected, quiet))
            time.sleep(0.5)

    def _quiet_subscriber(self, sub: Child, what: str, expected: int, quiet: float) -> str:
        what = (
            f"{what}: the subscriber read nothing new for {quiet:.0f}s "
            f"({sub.count:,} of {expected:,} messages)"
        )
        if all_merged(self.poller.poll()):
            what += (
                f"; every node reports all input merged: {expected - sub.count:,} "
                "messages are missing from the merged log"
            )
        return what


# -- steps several measurements take ----------------------------------------------------


def latency_traffic(opts: ClusterBenchOptions) -> tuple[int, int]:
    """(msg/s, messages) per publisher for the latency and stages runs."""
    rate = max(1, opts.latency_rate // len(PUBLISHERS))
    return rate, int(rate * opts.latency_seconds)


def started(b: Bench) -> int:
    """Start the stream, pass the warm-up messages and settle; returns how many."""
    b.start()
    skip = b.warm_up()
    settle(b)
    return skip


def settle(b: Bench) -> None:
    """A moment for the stream to settle after the warm-up (elections, connections)."""
    time.sleep(1.0)
    b.check_daemons()
