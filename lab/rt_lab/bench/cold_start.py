"""``rt bench cold-start``: how long a node takes from exec of ``rt node`` to READY,
holding N GiB of merged log.

A 1-node stream (:class:`~rt_lab.testing.stream.LocalStream`: a real ``rt node`` and
``rt push-client``, mutual TLS) is filled through its real path: a Publisher writes
64 KiB payloads, the push client replicates them into the node's inputs (``in/``) and
the node merges them into its merged log. Nothing is pruned from the merged log (the
archiver's age and size rules are off by default; its disk rule is set to 100%). The
publisher rolls every 64 MiB, so its rolled files are deleted once the node holds them
(``replication.delete_acked``) and the node's rolled inputs once they are merged
(``archiver.prune_inputs``), as in production: the merged log is most of what is on
disk. Several sizes are built one after another in the same stream, smallest first.

Once the merged log holds the size asked and every published record is merged, the
push client is stopped, so nothing arrives meanwhile, and the node is restarted
``runs`` times after each kind of stop: a clean stop (SIGTERM) and a crash (SIGKILL).
Each restart is timed from just before the process is started until its log shows the
``ready:`` line (what the node logs when it sends READY=1 to systemd), polled every
10 ms; the wall-clock stamps of its ``node rt-1 starting`` and ``ready:`` lines split
that time in two:

* exec to ``starting``: the interpreter, the imports, the configuration, and building
  the node (opening the merged log, recovering its last file, loading the raft journal);
* ``starting`` to ``ready:``: the event loop starts the servers and raft listens.

Before the next stop the node is left to settle: raft names it leader again and it
holds no unmerged input.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.errors import RTError
from rt_appliance.log.naming import publisher_dir_name
from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import NodeStatus
from rt_appliance.publish import Publisher
from rt_lab.bench.stats import Result
from rt_lab.testing.stream import LocalStream

__all__ = [
    "GIB",
    "KINDS",
    "SPACE_FACTOR",
    "TARGET_MS",
    "ColdStartFigures",
    "Marks",
    "OnDisk",
    "Restart",
    "find_marks",
    "log_time",
    "parse_sizes",
    "run_cold_start_bench",
    "space_needed",
]

GIB = 1 << 30
MIB = 1 << 20
NODE, HOST, TOPIC = "rt-1", "pub-1", "trades"
PAYLOAD_BYTES = 64 << 10  # far below limits.MAX_PAYLOAD_BYTES; 1 GiB is 16,384 of them
BATCH = 64  # payloads per publish_batch: 4 MiB per write
PUBLISHER_ROLL_BYTES = 64 << 20  # rolled files leave pub/ and in/ once replicated and merged
AHEAD_BYTES = 512 << 20  # most bytes published and not merged yet: bounds pub/ and in/
SPACE_FACTOR = 2.2  # free space asked for per GiB of merged log: inputs and merged log
TARGET_MS = 1500.0  # READY within 1.5 s of exec, with 1 GiB of merged log
TARGET_GIB = 1.0  # the size that target is set for (less data: the same target)
POLL_S = 0.01  # how often the node's log is read for its "ready:" line
READY_TIMEOUT_S = 120.0  # a node that is not ready by then has failed to start
SETTLE_TIMEOUT_S = 120.0  # a restarted node is leader with every input merged
BUILD_S_PER_GIB = 600.0  # a build that takes longer than this per GiB has stalled
PROGRESS_EVERY_S = 10.0

#: The kinds of restart: how the node is stopped before it is started again.
KINDS: dict[str, tuple[signal.Signals, str]] = {
    "clean": (signal.SIGTERM, "after a clean stop (SIGTERM)"),
    "crash": (signal.SIGKILL, "after a crash (SIGKILL)"),
}

# The configuration on top of LocalStream's: the merged log keeps everything (the
# archiver's retention_minutes and max_log_bytes are unset, which is off; the disk rule
# is the one on by default) and its files roll at sequencer.merged_roll_bytes' default.
EXTRA = {"archiver": {"max_disk_usage_percent": 100}}

Progress = Callable[[str], None]

# "2026-11-27 00:43:41,123 INFO name: message", as `rt --log-level info` logs
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


# -- pure logic: sizes, log lines, figures ------------------------------------------------


def parse_sizes(values: Iterable[str]) -> list[float]:
    """The sizes in GiB of ``--gib`` values, each a number or a comma-separated list of
    them, smallest first and each once. Raises ``ValueError`` for anything else."""
    sizes: set[float] = set()
    for value in values:
        for item in value.split(","):
            if not item.strip():
                continue
            try:
                size = float(item)
            except ValueError:
                raise ValueError(f"{item.strip()!r} is not a number of GiB") from None
            if not 0 < size <= 1024:
                raise ValueError(f"{item.strip()} GiB is not within 0..1024")
            sizes.add(size)
    if not sizes:
        raise ValueError("no size given")
    return sorted(sizes)


def space_needed(sizes: Iterable[float]) -> int:
    """Free bytes the bench needs: :data:`SPACE_FACTOR` times the largest size (the
    sizes are built one after another in one stream)."""
    return int(SPACE_FACTOR * max(sizes) * GIB)


def log_time(line: str) -> float | None:
    """The wall-clock time (seconds since the epoch) a log line was written at, from its
    local-time stamp; None for a line without one."""
    m = _STAMP.match(line)
    if m is None:
        return None
    return dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass(frozen=True, slots=True)
class Marks:
    """When a node's process logged ``node NAME starting`` and ``ready:`` (epoch seconds)."""

    starting: float
    ready: float


def find_marks(text: str, node: str) -> Marks | None:
    """The ``starting`` and ``ready:`` stamps of the first start of node ``node`` in
    ``text`` (a log written since the process was started), once both whole lines are
    there; None until then. A line still being written is not read."""
    starting: float | None = None
    for line in text[: text.rfind("\n") + 1].splitlines():
        if starting is None:
            if line.endswith(f" node {node} starting"):
                starting = log_time(line)
        elif ": ready: " in line:
            ready = log_time(line)
            if ready is not None and starting is not None:
                return Marks(starting, ready)
    return None


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart, in seconds: exec to the ``ready:`` line seen, and that time's two
    parts by the log's stamps (exec to ``starting``, ``starting`` to ``ready:``)."""

    total_s: float
    to_starting_s: float
    to_ready_s: float

    @classmethod
    def of(cls, exec_wall: float, seen_s: float, marks: Marks) -> Restart:
        """From the wall-clock time just before the exec, the seconds until ``ready:``
        was seen, and the log's stamps. The stamps are whole milliseconds, so a part can
        come out a fraction of a millisecond below zero; it counts as zero."""
        return cls(
            seen_s,
            max(0.0, marks.starting - exec_wall),
            max(0.0, marks.ready - marks.starting),
        )


@dataclass(frozen=True, slots=True)
class OnDisk:
    """What the node's data directory and the publisher's hold, in files and bytes."""

    merged_bytes: int
    merged_files: int
    input_bytes: int
    input_files: int
    publisher_bytes: int


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _label(gib: float) -> str:
    return f"{gib:g} GiB"


def _ms(values: list[float]) -> list[float]:
    return [1000 * v for v in values]


def _spread(values: list[float]) -> str:
    return f"min {min(values):,.0f}, max {max(values):,.0f}"


@dataclass(slots=True)
class ColdStartFigures:
    """Every figure of one size: what is on disk, how long it took to build, and the
    restarts of each kind (``{kind: [Restart, ...]}``)."""

    gib: float
    disk: OnDisk
    build_s: float
    restarts: dict[str, list[Restart]] = field(default_factory=dict)

    def results(self) -> list[Result]:
        size = _label(self.gib)
        target = f"<= {TARGET_MS:,.0f}" if self.gib <= TARGET_GIB else "-"
        d = self.disk
        out = [
            Result(
                f"{size}: merged log on disk",
                "MiB",
                "-",
                [d.merged_bytes / MIB],
                f"{_files(d.merged_files)}; node inputs (in/) {_mib(d.input_bytes)} in "
                f"{_files(d.input_files)}; publisher directory {_mib(d.publisher_bytes)}",
            ),
            Result(
                f"{size}: time to build",
                "s",
                "-",
                [self.build_s],
                "publish, push to the node and merge (from the size before)",
            ),
        ]
        for kind, (_, words) in KINDS.items():
            runs = self.restarts.get(kind, [])
            if not runs:
                continue
            total = _ms([r.total_s for r in runs])
            first = _ms([r.to_starting_s for r in runs])
            second = _ms([r.to_ready_s for r in runs])
            out += [
                Result(f"{size}, {words}: exec to READY", "ms", target, total, _spread(total)),
                Result(
                    f"{size}, {words}: exec to 'node {NODE} starting'",
                    "ms",
                    "-",
                    first,
                    _spread(first) + "; interpreter, imports, config, opening the logs",
                ),
                Result(
                    f"{size}, {words}: 'starting' to 'ready:'",
                    "ms",
                    "-",
                    second,
                    _spread(second) + "; servers started, raft listening",
                ),
            ]
        return out

    def verdicts(self) -> list[str]:
        """A line per kind of restart on the target, for the sizes it is set for."""
        if self.gib > TARGET_GIB:
            return []
        lines = []
        for kind, (_, words) in KINDS.items():
            runs = self.restarts.get(kind, [])
            if runs:
                median = 1000 * statistics.median(r.total_s for r in runs)
                met = "met" if median <= TARGET_MS else "missed"
                lines.append(
                    f"- {_label(self.gib)}, {words}: READY {median:,.0f} ms after exec "
                    f"(median), target {TARGET_MS:,.0f} ms: {met}."
                )
        return lines


# -- the stream ---------------------------------------------------------------------------


def check_space(workdir: Path, sizes: list[float]) -> None:
    """Raise :class:`RTError` unless ``workdir``'s filesystem has room for ``sizes``."""
    need = space_needed(sizes)
    free = shutil.disk_usage(workdir).free
    if free < need:
        raise RTError(
            f"{workdir} has {free / GIB:.1f} GiB free; {max(sizes):g} GiB of merged log "
            f"needs {need / GIB:.1f} GiB ({SPACE_FACTOR:g} x, for the inputs and the merged "
            "log): free some space, pick a smaller --gib or another --workdir"
        )


def _files_and_bytes(directory: Path) -> tuple[int, int]:
    count = total = 0
    for f in list_files(directory):
        try:
            total += f.path.stat().st_size
        except FileNotFoundError:  # pruned just now
            continue
        count += 1
    return count, total


def _tree_bytes(directory: Path) -> int:
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


class _Bench:
    """The stream of one bench run, its publisher's progress, and its restarts."""

    def __init__(self, stream: LocalStream, say: Progress) -> None:
        self.stream, self.say = stream, say
        self.published = 0  # payload bytes published so far
        self.next_id = 1
        self.payload = os.urandom(PAYLOAD_BYTES)
        self.input = publisher_dir_name(TOPIC, HOST)
        self.loads: list[float] = []  # 1-minute load average before each restart
        self.pushed = False  # the push client was stopped: its data is all in

    def merged_bytes(self) -> int:
        return _files_and_bytes(self.stream.merged_dir(NODE))[1]

    def on_disk(self) -> OnDisk:
        merged_files, merged_bytes = _files_and_bytes(self.stream.merged_dir(NODE))
        input_files, input_bytes = _files_and_bytes(self.stream.input_dir(NODE, HOST, TOPIC))
        pub = _tree_bytes(self.stream.publisher_dir(HOST, TOPIC))
        return OnDisk(merged_bytes, merged_files, input_bytes, input_files, pub)

    def _alive(self) -> None:
        """Raise if the node, or the push client while it should push, has exited."""
        pushing = self.stream.publisher_daemon(HOST)
        gone = {k: v for k, v in self.stream.exited().items() if k != pushing.name}
        if pushing.proc is not None and not pushing.running and not self.pushed:
            gone[pushing.name] = pushing.proc.returncode
        if gone:
            raise RTError(f"daemons exited while the bench ran: {gone}\n{self.stream.logs()}")

    def node(self) -> NodeStatus | None:
        answer = self.stream.node_status(timeout_s=5.0).get(NODE)
        return answer if isinstance(answer, NodeStatus) else None

    def grow_to(self, gib: float) -> float:
        """Publish until the merged log holds ``gib`` GiB with every record merged; the
        seconds it took."""
        target = int(gib * GIB)
        start = time.monotonic()
        deadline = start + 60 + BUILD_S_PER_GIB * gib
        shown = start
        pushing = self.stream.publisher_daemon(HOST)
        if not pushing.running:
            pushing.start()
        self.pushed = False
        with Publisher(
            self.stream.publisher_root(HOST),
            TOPIC,
            HOST,
            fsync="never",
            roll_bytes=PUBLISHER_ROLL_BYTES,
        ) as pub:
            while self.published < target:
                while self.published - self.merged_bytes() > AHEAD_BYTES:
                    self._alive()
                    if time.monotonic() > deadline:
                        raise RTError(f"{_label(gib)} not merged within {deadline - start:.0f}s")
                    time.sleep(0.05)
                ids = list(range(self.next_id, self.next_id + BATCH))
                pub.publish_batch([self.payload] * BATCH, ids=ids)
                self.next_id += BATCH
                self.published += BATCH * PAYLOAD_BYTES
                if time.monotonic() - shown >= PROGRESS_EVERY_S:
                    shown = time.monotonic()
                    self.say(f"building {_label(gib)}: {_mib(self.merged_bytes())} merged")
            end = int(pub.flush())

        def merged_all() -> bool:
            self._alive()
            status = self.node()
            if status is None:
                return False
            held = status.inputs.get(self.input)
            return held is not None and (held.held or 0) >= end and status.all_merged

        while not merged_all():
            if time.monotonic() > deadline:
                raise RTError(f"{_label(gib)} not merged within {deadline - start:.0f}s")
            if time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                self.say(f"building {_label(gib)}: {_mib(self.merged_bytes())} merged")
            time.sleep(0.1)
        return time.monotonic() - start

    def stop_pushing(self) -> None:
        """Stop the push client: nothing arrives at the node from now on."""
        self.stream.publisher_daemon(HOST).stop()
        self.pushed = True

    def restart(self, sig: signal.Signals) -> Restart:
        """Stop the node with ``sig``, start it, and time it until its ``ready:`` line."""
        daemon = self.stream.node_daemon(NODE)
        self.stream.kill_node(NODE, sig)
        self.loads.append(os.getloadavg()[0])
        offset = daemon.log_path.stat().st_size if daemon.log_path.exists() else 0
        exec_wall = time.time()
        start = time.perf_counter()
        self.stream.start_node(NODE)
        text = b""
        with open(daemon.log_path, "rb") as log:
            log.seek(offset)
            while True:
                text += log.read()
                marks = find_marks(text.decode(errors="replace"), NODE)
                if marks is not None:
                    seen = time.perf_counter() - start
                    break
                if not daemon.running:
                    tail = text.decode(errors="replace")[-3000:]
                    raise RTError(f"node {NODE} exited before it was ready:\n{tail}")
                if time.perf_counter() - start > READY_TIMEOUT_S:
                    raise RTError(f"node {NODE} not ready within {READY_TIMEOUT_S:.0f}s")
                time.sleep(POLL_S)
        self._settle()
        return Restart.of(exec_wall, seen, marks)

    def _settle(self) -> None:
        """Wait until the node leads again with every input merged."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            self._alive()
            status = self.node()
            if status is not None and status.is_leader and status.all_merged:
                return
            if time.monotonic() > deadline:
                raise RTError(f"node {NODE} did not settle within {SETTLE_TIMEOUT_S:.0f}s")
            time.sleep(0.05)


def run_cold_start_bench(
    work: Path, sizes: list[float], runs: int, say: Progress
) -> tuple[list[ColdStartFigures], list[float]]:
    """Build each of ``sizes`` (GiB, smallest first) in one 1-node stream in ``work`` and
    restart its node ``runs`` times after each kind of stop; the figures per size, and
    the 1-minute load averages seen before the restarts."""
    stream = LocalStream(work, nodes=1, publishers={HOST: [TOPIC]}, subscribers=[], extra=EXTRA)
    found: list[ColdStartFigures] = []
    bench = _Bench(stream, say)
    try:
        stream.start()
        stream.wait_leader()
        for gib in sizes:
            say(f"building {_label(gib)} of merged log")
            build_s = bench.grow_to(gib)
            bench.stop_pushing()  # nothing arrives during the restarts
            figures = ColdStartFigures(gib, bench.on_disk(), build_s)
            say(
                f"{_label(gib)}: merged log {_mib(figures.disk.merged_bytes)} in "
                f"{_files(figures.disk.merged_files)}, built in {build_s:.0f}s"
            )
            for run in range(1, runs + 1):
                for kind, (sig, words) in KINDS.items():  # interleaved: the same machine
                    one = bench.restart(sig)
                    figures.restarts.setdefault(kind, []).append(one)
                    say(
                        f"{_label(gib)} run {run}/{runs} {words}: READY after "
                        f"{1000 * one.total_s:,.0f} ms ({1000 * one.to_starting_s:,.0f} to "
                        f"'starting', {1000 * one.to_ready_s:,.0f} from there)"
                    )
            found.append(figures)
    finally:
        stream.stop()
    return found, bench.loads
