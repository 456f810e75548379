"""One chaos run from start to verdict: build the world, load it, inject the schedule,
stop publishing, wait for the stream to settle, judge, report."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import NodeStatus, leader_of
from rt_appliance.subscribe import Subscriber
from rt_lab.chaos.availability import Availability, judge_availability
from rt_lab.chaos.checker import (
    Verdict,
    count_unacked,
    judge_copies,
    judge_logs,
    judge_reader,
    judge_slice,
)
from rt_lab.chaos.history import (
    Delivery,
    PublisherHistory,
    read_delivered,
    read_journal,
    read_log,
)
from rt_lab.chaos.monitor import Monitor, Sample, moved_after, recovery_time, stall_time
from rt_lab.chaos.nemesis import Injected, Nemesis
from rt_lab.chaos.schedule import ELECTION_S, Fault, Load, draw_schedule
from rt_lab.chaos.world import World, available_faults
from rt_lab.testing.checkers import log_files_or_empty

__all__ = ["ChaosOptions", "ChaosResult", "run_chaos"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    workdir: Path
    seed: int
    nodes: int = 3
    seconds: float = 120.0
    faults: tuple[str, ...] = ()
    rate: float = 200.0  # messages per second per publisher
    settle_s: float = 120.0  # bound on recovery after the faults stop: beyond it, stuck
    partitions: str = "auto"  # how partitions are made (world.PARTITION_MODES)
    max_stall_s: float = ELECTION_S + 1.0  # longest a one-node fault may stop merging


@dataclass(slots=True)
class ChaosResult:
    options: ChaosOptions
    schedule: list[Fault]
    unavailable: dict[str, str]
    injected: list[Injected] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)
    settled_s: float | None = None  # None: did not settle (stuck)
    stuck: list[str] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)  # daemons that exited on their own
    elapsed_s: float = 0.0
    availability: Availability | None = None  # judged once the faults are over

    @property
    def safe(self) -> bool:
        return self.verdict.safe

    @property
    def available(self) -> bool:
        return self.availability is None or self.availability.ok


Progress = Callable[[str], None]


def run_chaos(options: ChaosOptions, progress: Progress = print) -> ChaosResult:
    faults, unavailable = available_faults(options.faults, options.partitions)
    load = Load()
    schedule = draw_schedule(options.seed, options.seconds, options.nodes, faults, ELECTION_S)
    result = ChaosResult(options, schedule, unavailable)
    for name, why in unavailable.items():
        progress(f"fault {name} not available here: {why}")
    started = time.monotonic()
    world = World(options.workdir, options.nodes, faults, options.rate, load, options.partitions)
    stop = threading.Event()
    try:
        progress(f"starting {options.nodes} nodes, {len(load.publisher_hosts)} publishers")
        world.start()
        world.stream.wait_leader(60)
        t0 = time.monotonic()
        monitor = Monitor(world.stream, t0).start()
        nemesis = Nemesis(world, options.seed, t0, stop)
        try:
            for index, fault in enumerate(schedule):
                stop.wait(max(0.0, t0 + fault.at_s - time.monotonic()))
                record = nemesis.inject(index, fault)
                progress(
                    f"[{record.started:7.1f}s] {fault.describe()}: {record.did}"
                    + (f" FAILED: {record.error}" if record.error else "")
                )
            stop.wait(max(0.0, t0 + options.seconds - time.monotonic()))
        finally:
            nemesis.undo_all()
        progress("faults over; publishers stop; waiting for the stream to settle")
        world.stop_publishers()
        _settle(world, result, options.settle_s, progress)
        monitor.stop()
        result.samples = monitor.samples
        result.exits = monitor.exits
        result.injected = nemesis.injected
        for index, record in enumerate(result.injected):
            following = result.injected[index + 1 : index + 2]
            until = following[0].started if following else None
            record.recovery_s = recovery_time(result.samples, record.ended, options.nodes)
            record.stall_s = stall_time(monitor.marks, record.started, record.ended, until)
            record.moved_at = moved_after(monitor.marks, record.ended)
        result.availability = judge_availability(result.injected, options.max_stall_s)
        for host in world.load.subscribers:
            world.app(host).stop()
        _judge(world, result)
    finally:
        stop.set()
        world.close()
        result.elapsed_s = round(time.monotonic() - started, 1)
    return result


def _sizes(directory: Path) -> tuple[tuple[str, int], ...]:
    try:
        return tuple((f.path.name, f.path.stat().st_size) for f in list_files(directory))
    except (FileNotFoundError, OSError):
        return ()


def _journal_end(path: Path) -> int:
    """The position after the last whole batch of a subscriber journal."""
    last = 0
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("P "):
                last = int(line.split()[1])
    return last


def _settle(world: World, result: ChaosResult, bound_s: float, progress: Progress) -> None:
    """Wait until every merged log and copy holds the same files with the same sizes,
    nothing changed for a while, each subscriber application read to the end, and the
    nodes name a leader; or record what is stuck after ``bound_s``."""
    stream = world.stream
    dirs = {**stream.merged_dirs(), **{s: stream.subscriber_dir(s) for s in world.load.subscribers}}
    began = time.monotonic()
    last: dict[str, tuple[tuple[str, int], ...]] = {}
    still = 0
    behind: list[str] = []
    while time.monotonic() - began < bound_s:
        sizes = {name: _sizes(d) for name, d in dirs.items()}
        reference = next(iter(sizes.values()))
        behind = [n for n, s in sizes.items() if s != reference]
        for sub in world.load.subscribers:
            try:
                end = int(Subscriber(stream.subscriber_dir(sub)).end_position())
            except Exception:
                end = -1
            if _journal_end(world.journal(sub)) != end:
                behind.append(f"app-{sub}")
        still = still + 1 if sizes == last and not behind else 0
        last = sizes
        if still >= 3:
            leader, unmerged = _merge_state(world)
            if leader is not None and not unmerged:
                result.settled_s = round(time.monotonic() - began, 1)
                progress(f"settled after {result.settled_s}s")
                return
            behind = unmerged if leader is not None else ["no leader"]
        time.sleep(1.0)
    result.stuck = behind or ["logs still changing"]
    result.verdict["stuck"].add(1, [f"not settled after {bound_s:.0f}s: {', '.join(behind)}"])
    progress(f"STUCK after {bound_s:.0f}s: {', '.join(result.stuck)}")


def _merge_state(world: World) -> tuple[str | None, list[str]]:
    """The leader the nodes name, and what a reachable node holds but has not merged:
    logs that stopped changing are not settled while input waits (a stalled merge)."""
    try:
        answers = world.stream.node_status()
    except Exception:
        return None, []
    return leader_of(answers), [
        _unmerged(a) for a in answers.values() if isinstance(a, NodeStatus) and not a.all_merged
    ]


def _unmerged(node: NodeStatus) -> str:
    waiting = [f"{name} ({i.lag_bytes} B)" for name, i in node.inputs.items() if i.lag_bytes]
    if waiting:
        return f"{node.name} holds unmerged input {', '.join(waiting)}"
    return f"{node.name} wrote merged seq {node.merged_seq} of {node.committed_seq} committed"


def _judge(world: World, result: ChaosResult) -> None:
    stream, verdict = world.stream, result.verdict
    histories: list[PublisherHistory] = [
        read_journal(world.journal(h), world.topic_of(h), h) for h in world.load.publisher_hosts
    ]
    merged = stream.merged_dirs()
    copies = {s: stream.subscriber_dir(s) for s in world.load.subscribers}
    contents = {name: log_files_or_empty(d) for name, d in {**merged, **copies}.items()}
    behind = judge_logs(verdict, contents)
    if behind and not result.stuck:
        verdict["stuck"].add(1, [f"behind the others: {', '.join(behind)}"])
    identical = len({tuple(sorted(c.items())) for c in contents.values()}) == 1
    # The applications delivered every message from the first on; the logs and copies
    # may have lost their oldest files to the archiver since. So the applications are
    # judged against the publishers' journals, and each merged log against them.
    apps = {f"app-{sub}": read_delivered(world.journal(sub)) for sub in world.load.subscribers}
    reference = next(iter(apps))
    for name, delivered in apps.items():
        judge_reader(verdict, name, delivered, histories)
    judge_copies(verdict, reference, apps)
    for name in list(merged) if not identical else list(merged)[:1]:
        judge_slice(verdict, name, _read(merged[name], verdict, name), reference, apps[reference])
    count_unacked(verdict, apps[reference], histories)


def _read(directory: Path, verdict: Verdict, name: str) -> list[Delivery]:
    try:
        return read_log(directory)
    except Exception as exc:
        verdict["divergent"].add(1, [f"{name}: reading {directory} failed: {exc}"])
        return []
