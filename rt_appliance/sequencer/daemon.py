"""The sequencer of ``rt node``: raft, the control channel, the planner, the merger and
the archiver.

Who owns what. The event loop runs raft, and raft's heartbeats and votes wait for
anything else it runs, so nothing on it blocks (waits on a lock another thread holds
long, syncs, walks a directory):

* **the event loop**: pysyncobj (ticked by :meth:`RaftNode.run`; all of its state is
  read and changed here only: ``apply``, snapshots, ``RaftNode.status``), the raft,
  control and report links (TLS), and the small loops that
  observe, archive, grant leases and measure the loop's lag;
* **the offload threads** (:mod:`rt_appliance.transport.offload`): raft's journal syncs;
* **worker threads** (``asyncio.to_thread``): the planner's large steps (a small one,
  a stream keeping up, runs on the loop), a follower's report when its holds must be
  read from their files, the file half of a STATUS answer
  (:meth:`Sequencer.status`: input lags, disk, holds) and the observer's gauges;
* **the merger's thread**: the merged log, written and synced there only. A raft
  snapshot does not wait for it: the state machine keeps what the merger carried out
  but has not synced yet, and the snapshot owes that work (:mod:`.machine`).

Files of a node::

    <data_dir>/in/<topic>.<host>/   inputs (written by the push server)
    <data_dir>/merged/              the merged log (written by the merger)
    <data_dir>/raft/                raft journal and snapshot
    <data_dir>/log-history.jsonl    one line per archiver prune
    <data_dir>/holds/<name>.json    how far a local consumer (the Spark pipeline) committed
    <data_dir>/leases/<name>.*      a job run once per stream: its want, its lease (.leases)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from rt_appliance import trace, versions
from rt_appliance.clock import wall_ns
from rt_appliance.config.model import StreamConfig
from rt_appliance.daemons.runner import serve_metrics
from rt_appliance.daemons.tasks import cancel_and_wait
from rt_appliance.errors import RTError
from rt_appliance.heartbeat import sequencer_file, write_sequencer_file
from rt_appliance.limits import (
    GAUGES_EVERY_S,
    HAND_OVER_ON_STOP_S,
    HAND_OVER_POLL_S,
    HEARTBEAT_EVERY_S,
    HOLDS_REPORT_WAIT_INTERVALS,
    INLINE_PLAN_BYTES,
    LAG_PROBE_S,
    LAG_WINDOW_S,
    LEASE_EVERY_S,
    OBSERVE_EVERY_S,
    PLAN_IDLE_S,
    PRUNE_COMMIT_WAIT_S,
    REPORT_DEFER_S,
    SLOW_STOP_STEP_S,
)
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import PeerFetcher
from rt_appliance.replicate.sink import FileEnd
from rt_appliance.sequencer import archiver, holds, leases
from rt_appliance.sequencer.control import ControlServer, Reporter
from rt_appliance.sequencer.fitness import Fitness, is_write_failure
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merged import MergedLog
from rt_appliance.sequencer.merger import Merger, prebuild
from rt_appliance.sequencer.planner import Planner
from rt_appliance.sequencer.raft import RaftNode, RaftStatus, journal
from rt_appliance.sequencer.state import Lease, Prune

__all__ = ["Sequencer"]

log = logging.getLogger(__name__)


class _Total:
    """A counter that follows a running total kept elsewhere (it only ever moves up)."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self._seen = 0

    def follow(self, total: int) -> None:
        if total > self._seen:
            self.counter.inc(total - self._seen)
            self._seen = total


class _Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.is_leader = Gauge("rt_sequencer_is_leader", "1 on the raft leader", registry=r)
        self.term = Gauge("rt_sequencer_raft_term", "Raft term", registry=r)
        self.commit = Gauge("rt_sequencer_raft_commit_index", "Raft commit index", registry=r)
        self.quorum = Gauge("rt_sequencer_has_quorum", "1 when raft has a quorum", registry=r)
        self.raft_entries = Gauge(
            "rt_sequencer_raft_log_entries",
            "Entries in the raft journal since the last snapshot (what a restart replays)",
            registry=r,
        )
        self.unapplied = Gauge(
            "rt_sequencer_raft_unapplied_entries",
            "Committed raft entries not applied yet (a restart's replay, a catch-up)",
            registry=r,
        )
        self.merged_seq = Gauge(
            "rt_sequencer_merged_seq", "Merged records written here", registry=r
        )
        self.committed_seq = Gauge("rt_sequencer_committed_seq", "Merges committed", registry=r)
        self.merged_bytes = Gauge(
            "rt_sequencer_merged_position_bytes", "Offset in the newest merged file", registry=r
        )
        self.input_lag = Gauge(
            "rt_sequencer_input_lag_bytes",
            "Input bytes held here, not yet merged",
            ["input"],
            registry=r,
        )
        self.proposed = Counter("rt_sequencer_proposed", "Merges proposed (leader)", registry=r)
        self.rejected = _Total(
            Counter("rt_sequencer_rejected", "Instructions rejected by apply", registry=r)
        )
        self.halted = Gauge("rt_sequencer_halted", "1 while the merger cannot proceed", registry=r)
        self.fetched = _Total(
            Counter("rt_sequencer_fetched_inputs", "Merges built from peers' input", registry=r)
        )
        self.planned_from_peers = _Total(
            Counter(
                "rt_sequencer_planned_from_peers",
                "Ranges this leader planned from a peer's copy of an input (its own lacked them)",
                registry=r,
            )
        )
        self.carried = _Total(
            Counter(
                "rt_sequencer_carried",
                "Ranges this leader proposed with their input bytes in the raft entry",
                registry=r,
            )
        )
        self.repaired_inputs = _Total(
            Counter(
                "rt_sequencer_repaired_inputs",
                "Damaged ranges of this node's inputs rewritten from a peer's bytes",
                registry=r,
            )
        )
        self.copied = _Total(
            Counter("rt_sequencer_copied_records", "Merged records copied from peers", registry=r)
        )
        self.scrub_damaged = _Total(
            Counter(
                "rt_sequencer_scrub_damaged",
                "Damage the scrubber found in this node's merged log",
                registry=r,
            )
        )
        self.scrub_repaired = _Total(
            Counter(
                "rt_sequencer_scrub_repaired",
                "Damage in this node's merged log repaired from a peer's bytes",
                registry=r,
            )
        )
        self.prevote_asked = _Total(
            Counter(
                "rt_sequencer_prevote_rounds",
                "Times this node's election timeout passed and it asked whether it would win",
                registry=r,
            )
        )
        self.prevote_won = _Total(
            Counter(
                "rt_sequencer_prevote_won",
                "Of those, rounds a majority said yes to (an election followed)",
                registry=r,
            )
        )
        self.refused = Counter(
            "rt_sequencer_refused",
            "Raft/control connections or frames refused",
            ["what"],
            registry=r,
        )
        self.pruned = _Total(
            Counter("rt_sequencer_pruned_files", "Merged files pruned here", registry=r)
        )
        self.disk = Gauge("rt_sequencer_disk_used_percent", "Data filesystem use", registry=r)
        self.hold_behind = Gauge(
            "rt_sequencer_hold_behind_bytes",
            "Merged bytes after a local consumer's hold (the Spark pipeline's lag)",
            ["hold"],
            registry=r,
        )
        self.hold_gap = Gauge(
            "rt_sequencer_hold_gap",
            "1 when merged files a local consumer had not committed were pruned",
            ["hold"],
            registry=r,
        )
        self.unfit = Gauge(
            "rt_sequencer_unfit_to_lead",
            "1 while this node's writes fail (full disk, EIO): it stands for no election",
            registry=r,
        )
        self.stepped_down = Counter(
            "rt_sequencer_stepped_down_total",
            "Leaderships this node gave up because it could not write, by what failed",
            ["cause"],
            registry=r,
        )
        self.lease_held = Gauge(
            "rt_sequencer_lease_held",
            "1 while this node holds the lease (a job run once per stream, such as the "
            "failover Spark pipeline), by the committed state and this node's clock",
            ["lease"],
            registry=r,
        )
        self.lease_grants = Gauge(
            "rt_sequencer_lease_grants",
            "How many times the lease went to a new holder (a rise is a failover)",
            ["lease"],
            registry=r,
        )
        self.loop_lag = Gauge(
            "rt_sequencer_loop_lag_seconds",
            "Longest the event loop (raft, control channel) was late over the last second",
            registry=r,
        )


class Sequencer:
    """One node's sequencer; :meth:`run` until cancelled."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        metrics_port: int | None,
        held: Callable[[str], Position | None],
        written: Callable[[str], Position | None] | None = None,
        ended: Callable[[str, tuple[int, int]], FileEnd | None] | None = None,
        known: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``held``: how far the node's push server holds an input, synced (None: not
        known there); the push server calls :meth:`input_synced` after each sync.
        ``written``: how far it has written one, synced or not; it calls
        :meth:`input_written` after each write (the leader may carry those bytes).
        ``ended``: how a file of an input ended, if it saw the sender move on from it
        (the leader carries on into the next file). ``known``: the inputs it writes."""
        self.config, self.name = config, node_name
        node = config.node(node_name)
        self.data_dir = config.data_dir_of(node)
        self.metrics_port = config.ports.sequencer_metrics if metrics_port is None else metrics_port
        self.metrics = _Metrics()
        self.machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
        self.inputs = Inputs(
            self.data_dir / "in",
            sync=config.replication.fsync != "never",
            held=held,
            written=written,
            ended=ended,
            known=known,
        )
        self.merged = MergedLog(self.data_dir / "merged")
        self.fetcher = PeerFetcher(config, node_name)
        self.fitness = Fitness()  # the servers' and the merger's write failures
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake = asyncio.Event()
        self._inputs_changed = asyncio.Event()
        self.merger = Merger(
            config,
            node_name,
            self.machine,
            self.merged,
            self.inputs,
            self.fetcher,
            self.data_dir / "log-history.jsonl",
            on_write_failure=lambda why: self.fitness.failed("merged_log", why),
            leader=lambda: self.raft.leader(),
        )
        self.raft = RaftNode(config, node_name, self.data_dir / "raft", self.machine)
        journal.ON_FULL[:] = [self._journal_full]
        self.raft.set_refusal_hook(lambda what: self.metrics.refused.labels(what).inc())
        self.planner = Planner(
            config,
            node_name,
            self.machine,
            self.inputs,
            self.raft,
            self.wake,
            behind=lambda why: self.fitness.failed("input_behind", why),
            fetcher=self.fetcher,
        )
        self.machine.listeners.append(self.wake)
        self.machine.prebuild = prebuild  # carried merges: built once, as they are applied
        self.raft.on_settled = self.wake  # a new leader plans once its log is applied
        # the observer runs once a second, and at once when the leader changes or a
        # write fails (a leader that cannot write steps down without waiting for it)
        self._observe_now = asyncio.Event()
        self.raft.on_leader_change = self._observe_soon
        self.fitness.on_failure = self._observe_soon
        self._stop = threading.Event()
        self._leader_seen: str | None = "?"
        self._heartbeat_failing = False  # the heartbeat file could not be written last time
        report_s = config.sequencer.report_interval_ms / 1000
        self._own_holds: dict[str, int] | None = None  # this node's holds, as last read
        self._holds_due = 0.0  # when to read them again
        self._holds_version: tuple[int, int] | None = None  # their directory when read
        self._fresh: bool | None = None  # _report_cheap's verdict, for the report it precedes
        self._holds_seen = holds.LeaderHolds(  # leader: every node's holds
            node_name, [n.name for n in config.nodes], HOLDS_REPORT_WAIT_INTERVALS * report_s
        )
        # leases of jobs run once per stream (the failover Spark pipeline), if any
        self._leasing = config.spark.enabled and config.spark.failover
        # leader: which node wants which lease, by its reports of the last two intervals
        # (a dead holder's last want would otherwise be renewed for as long)
        self._wants_seen = leases.LeaderWants(node_name, max(1.0, 2 * report_s))
        self._own_wants: list[str] = []
        self._wants_due = 0.0
        self._old_peers_said: frozenset[str] = frozenset()
        # READY for systemd: the merged log was recovered above; raft must listen too.
        self.ready = asyncio.Event()

    def wake(self) -> None:
        """Wake the planner, from any thread (on the loop itself without the self-pipe:
        raft applies and answers proposals there, thousands of times a second)."""
        self._set(self._wake)

    def _observe_soon(self) -> None:
        """Run the observer now rather than at its next second, from any thread."""
        self._set(self._observe_now)

    def _set(self, event: asyncio.Event) -> None:
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    def leader(self) -> str | None:
        return self.raft.leader()

    def input_synced(self) -> None:
        """The node's push server synced input bytes (on this loop): report and plan now."""
        self._inputs_changed.set()
        self._wake.set()

    def input_written(self) -> None:
        """The node's push server wrote input bytes, not synced yet (on this loop): a
        leader plans now, carrying them in its entry if no majority reported them yet."""
        if self.planner.carrying:
            self._wake.set()

    async def run(self) -> None:
        self._loop_thread = threading.get_ident()
        self._loop = asyncio.get_running_loop()
        serve_metrics(self.metrics.registry, self.config.node(self.name).host, self.metrics_port)
        self.merger.start()
        control = ControlServer(
            self.config,
            self.name,
            self.leader,
            self._on_report,
            self.status,
            lambda: self.metrics.refused.labels("control").inc(),
        )
        await control.start()
        reporter = Reporter(
            self.config,
            self.name,
            self.leader,
            self._report_fields,
            self._inputs_changed,
            self._report_cheap,
            self._report_defer,
        )
        tasks = [
            asyncio.create_task(self.raft.run(), name="raft"),
            asyncio.create_task(reporter.run(), name="reporter"),
            asyncio.create_task(self._plan_loop(), name="planner"),
            asyncio.create_task(self._archive_loop(), name="archiver"),
            asyncio.create_task(self._observe_loop(), name="observer"),
            asyncio.create_task(self._lag_loop(), name="loop-lag"),
        ]
        if self._leasing:
            tasks.append(asyncio.create_task(self._lease_loop(), name="leases"))
        log.info(
            "sequencer %s: merged log %s, seq %d", self.name, self.merged.directory, self.merged.seq
        )
        tasks.append(asyncio.create_task(self._announce_ready(), name="ready"))
        try:
            await asyncio.gather(*tasks)
        finally:
            await cancel_and_wait(tasks)
            with _stop_step("the control server"):
                await control.stop()
            self._stop.set()
            with _stop_step("raft"):
                self.raft.destroy()
            with _stop_step("the merger"):
                self.merger.stop()
            self.fetcher.close()
            self.merged.close()

    async def _announce_ready(self) -> None:
        await self.raft.wait_listening()
        self.ready.set()

    async def hand_over(self, timeout_s: float = HAND_OVER_ON_STOP_S) -> bool:
        """Before a clean stop: a leader hands leadership to a caught-up follower (raft's
        TimeoutNow), so that the stream waits for no election timeout. False if it still
        leads after ``timeout_s`` (it then stops anyway, and the others elect)."""
        if len(self.config.nodes) == 1 or not self.raft.is_leader():
            return True
        term = self.raft.term()
        log.info("stopping as leader (term %d): handing leadership over first", term)
        deadline = time.monotonic() + timeout_s
        # unfit (for UNFIT_HOLD_S, longer than the wait): it proposes nothing more, and
        # raft asks a caught-up follower to stand, again on every tick until one does
        self.fitness.failed("stopping", "asked to stop; handing leadership over")
        # until another node is named leader (or nobody is left to hand over to: the
        # others are stopping too)
        while (
            (self.raft.is_leader() or self.raft.leader() is None)
            and time.monotonic() < deadline
            and self.raft.status().connected
        ):
            await asyncio.sleep(HAND_OVER_POLL_S)
        if self.raft.is_leader():
            log.warning("no follower took leadership within %gs; stopping as leader", timeout_s)
            return False
        log.info("handed leadership over (leader now %s)", self.raft.leader() or "being elected")
        return True

    def status_line(self) -> str:
        """One line for systemd's status, e.g. ``leader, term 3, merged seq 1200, 2 inputs``."""
        raft = self.raft.status()
        line = (
            f"{raft.role}, term {raft.term}, merged seq {self.merged.seq}, "
            f"{len(self.inputs.extents())} inputs"
        )
        if raft.role != "leader":
            line += f", leader {raft.leader or 'unknown'}"
        return line + (f", HALTED: {self.merger.halted}" if self.merger.halted else "")

    def _on_report(
        self,
        node: str,
        extents: dict[str, int],
        node_holds: dict[str, int],
        ends: dict[str, list[int]] | None,
        wants: list[str],
    ) -> None:
        self.planner.report(node, extents, ends)
        if trace.enabled():
            for name, extent in extents.items():
                trace.event("reported", f"{node}/{name}", extent)
        self._holds_seen.report(node, node_holds)
        self._wants_seen.report(node, wants, time.monotonic())
        self._wake.set()

    def _report_fields(self) -> dict[str, Any]:
        """What a follower reports to the leader: its input extents, consumer holds, and
        where its copies of the input files from the merged positions on end.

        The holds are read from their files again once per report interval, and at
        once when their directory changed (a hold written: a new consumer's must count
        from the next report, or the leader could prune what it holds), so most reports
        are made from memory and a few stats."""
        now = time.monotonic()
        fresh, self._fresh = self._fresh, None  # _report_cheap's look, just before
        if not (fresh if fresh is not None else self._holds_fresh(now)):
            self._holds_version = holds.directory_version(self.data_dir)
            self._own_holds = {h.name: int(h.position) for h in holds.read_holds(self.data_dir)}
            self._holds_due = now + self.config.sequencer.report_interval_ms / 1000
        with self.machine.cond:
            merged = dict(self.machine.state.inputs)
        fields: dict[str, Any] = {
            "extents": self.inputs.extents(),
            "holds": self._own_holds,
            "ends": self.inputs.file_ends(merged),
        }
        if self._leasing:
            fields["leases"] = self._wants(now)
        return fields

    def _wants(self, now: float) -> list[str]:
        """The leases this node's jobs want, read again at most every LEASE_EVERY_S."""
        if now >= self._wants_due:
            self._own_wants = leases.read_wants(self.data_dir)
            self._wants_due = now + LEASE_EVERY_S
        return self._own_wants

    def _report_cheap(self) -> bool:
        """Whether a report now is made from memory only, and may run on the loop: in the
        node process (the extents are the push server's) with the holds read recently.
        The report made next takes this look as its own (one stat per report)."""
        self._fresh = self._holds_fresh(time.monotonic())
        return self._fresh

    def input_later(self) -> bool:
        """Whether publishers may send this node their writes a little later: a follower
        while the leader carries the input in its entries (the last merge applied did),
        when no merge waits for this node's copy."""
        return self.machine.last_carried and not self.raft.is_leader()

    def _report_defer(self) -> float:
        """How long a follower's changed extents wait before they are reported: while the
        leader carries the input in its entries (the last merge applied did), the merges
        do not wait for reports, and one made now would run in the middle of raft's round
        for the same bytes, on this node and the leader; at once otherwise (a backlog, an
        input's next file, a leader lacking its own copy plan from the reports)."""
        return REPORT_DEFER_S if self.machine.last_carried else 0.0

    def _holds_fresh(self, now: float) -> bool:
        """Whether the holds read last still stand: read this report interval, and their
        directory unchanged since (one stat)."""
        return (
            self._own_holds is not None
            and now < self._holds_due
            and holds.directory_version(self.data_dir) == self._holds_version
        )

    def _hold_roll(self, first_roll: int) -> int | None:
        """The oldest merged roll a consumer on any node still needs (leader)."""
        own = [int(h.position) for h in holds.read_holds(self.data_dir)]
        return self._holds_seen.oldest_roll(own, first_roll, time.monotonic())

    async def _plan_loop(self) -> None:
        """Plan on every wake. A step that reads little (a stream keeping up) runs on the
        loop, with no hand-off to a thread; once one reaches ``INLINE_PLAN_BYTES``, the
        steps run in a worker thread until one reads less again (a backlog)."""
        inline = True
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PLAN_IDLE_S):  # no task per wait, as wait_for makes
                    await self._wake.wait()
            self._wake.clear()
            if not self.raft.is_leader() or self.raft.unfit is not None:
                continue  # an unfit leader plans nothing: its followers catch up, one leads
            if inline:
                made = self.planner.step(INLINE_PLAN_BYTES)
                if made:
                    self.raft.send_proposals()  # the entries leave now, not after the loop's queue
                if self.planner.cut_short or self.planner.wants_fetch:
                    inline = False
                    self._wake.set()  # the rest in a worker thread, at once
            else:  # there, it may also read a peer's copy of an input its own lacks
                made = await asyncio.to_thread(self.planner.step, None, True)
                inline = self.planner.read_bytes < INLINE_PLAN_BYTES and not (
                    self.planner.from_peers_in_step
                )
            if made:
                self.metrics.proposed.inc(made)

    async def _archive_loop(self) -> None:
        policy = self.config.archiver
        while True:
            await asyncio.sleep(policy.interval_ms / 1000)
            leading = self.raft.is_leader()
            self._holds_seen.leading(time.monotonic() if leading else None)
            if not leading:
                continue
            files = archiver.merged_files(self.merged.directory)
            if not files:
                continue
            disk = archiver.disk_usage(self.data_dir)
            hold_roll = await asyncio.to_thread(self._hold_roll, files[0].roll)
            decision = archiver.decide(files, wall_ns(), disk, policy, hold_roll)
            committed = self.machine.committed()
            if decision is None or decision[0] <= committed.pruned_below:
                continue
            below, reason = decision
            if hold_roll is not None and below > hold_roll:
                log.error("archiver: proposing to prune merged rolls below %d (%s)", below, reason)
            else:
                log.info("archiver: proposing to prune merged rolls below %d (%s)", below, reason)
            done = asyncio.Event()
            self.raft.propose(Prune(below, reason, wall_ns()).encode(), _setter(done))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PRUNE_COMMIT_WAIT_S):
                    await done.wait()

    async def _lease_loop(self) -> None:
        """Every node: write the committed leases for its jobs. The leader: grant and
        renew them (:func:`leases.decide`), through raft."""
        ttl_ns = self.config.spark.lease_ms * 1_000_000
        written: dict[str, Any] = {}
        self.metrics.lease_held.labels("spark-pipeline").set(0)  # an alert sees it before a grant
        while True:
            await asyncio.sleep(LEASE_EVERY_S)
            with self.machine.cond:
                committed = {k: dict(v) for k, v in self.machine.state.leases.items()}
            now = wall_ns()
            for name, lease in committed.items():
                self.metrics.lease_held.labels(name).set(
                    1 if lease["holder"] == self.name and lease["until"] > now else 0
                )
                self.metrics.lease_grants.labels(name).set(lease["grants"])
                if written.get(name) != lease:
                    try:
                        await asyncio.to_thread(leases.write_lease, self.data_dir, name, lease)
                    except OSError as exc:  # its job then stops trusting the lease in time
                        log.warning("leases: cannot write %s: %s; retrying", name, exc)
                        continue
                    written[name] = lease
            if not self.raft.leading_settled() or self.raft.unfit is not None:
                continue
            if not self._peers_know_leases():
                continue
            wanting = self._wants_seen.wanting(self._wants(time.monotonic()), time.monotonic())
            for grant in leases.decide(committed, wanting, wall_ns(), ttl_ns):
                await self._propose_lease(grant, committed.get(grant.name))

    async def _propose_lease(self, grant: Lease, before: dict[str, Any] | None) -> None:
        if before is None or before["holder"] != grant.holder or before["until"] <= grant.ts:
            log.info("leases: granting %s to %s", grant.name, grant.holder)
        done = asyncio.Event()
        self.raft.propose(grant.encode(), _setter(done))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PRUNE_COMMIT_WAIT_S):
                await done.wait()

    def _peers_know_leases(self) -> bool:
        """Whether every peer that connected speaks a raft protocol with leases: a node
        of an older release would refuse the grants (and could not restore them)."""
        old = frozenset(self.raft.peers_without("leases"))
        if old != self._old_peers_said and old:
            log.warning(
                "leases: %s run a release without leases; none is granted until they are upgraded",
                ", ".join(sorted(old)),
            )
        self._old_peers_said = old
        return not old

    async def _observe_loop(self) -> None:
        path = sequencer_file(self.config, self.config.node(self.name))
        next_gauges = next_heartbeat = 0.0
        heard: tuple[str | None, bool] | None = None  # what the heartbeat file says
        while True:
            if self.merger.failure is not None:  # the merger thread is gone: stop for a restart
                raise RTError(f"sequencer {self.name}: {self.merger.halted}")
            if self.raft.failure is not None:  # the journal cannot be trusted: likewise
                failure = self.raft.failure
                raise RTError(f"sequencer {self.name}: raft journal sync failed: {failure}")
            self._judge_fitness()
            status = self.raft.status()
            m = self.metrics
            m.is_leader.set(1 if status.role == "leader" else 0)
            m.term.set(status.term)
            m.commit.set(status.commit_index)
            m.raft_entries.set(status.log_entries)
            m.unapplied.set(max(0, status.commit_index - status.last_applied))
            m.quorum.set(1 if status.has_quorum else 0)
            m.merged_seq.set(self.merged.seq)
            m.committed_seq.set(self.machine.state.seq)
            m.merged_bytes.set(Position(self.merged.end).offset)
            m.rejected.follow(self.machine.state.rejected)
            m.halted.set(1 if self.merger.halted else 0)
            m.fetched.follow(self.merger.fetched_inputs)
            m.planned_from_peers.follow(self.planner.from_peers)
            m.carried.follow(self.planner.carried)
            m.repaired_inputs.follow(self.merger.repaired_inputs)
            m.copied.follow(self.merger.copied_records)
            m.scrub_damaged.follow(self.merger.scrubber.damaged)
            m.scrub_repaired.follow(self.merger.scrubber.repaired)
            m.pruned.follow(self.merger.pruned_files)
            m.prevote_asked.follow(self.raft.prevote.rounds)
            m.prevote_won.follow(self.raft.prevote.won)
            if status.leader != self._leader_seen:
                log.info(
                    "raft: leader is now %s (term %d)", status.leader or "unknown", status.term
                )
                self._leader_seen = status.leader
                self._wake.set()  # a new leader plans at once
                self._inputs_changed.set()  # and a follower reports to it at once
            said = (status.leader, status.has_quorum)
            if time.monotonic() >= next_heartbeat or said != heard:  # for the pull server
                self._heartbeat(path, *said)  # a change at once
                next_heartbeat, heard = time.monotonic() + HEARTBEAT_EVERY_S, said
            if time.monotonic() >= next_gauges:  # gauges that cost a directory walk
                await asyncio.to_thread(self._walked_gauges)  # one thread hop for all
                next_gauges = time.monotonic() + GAUGES_EVERY_S
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OBSERVE_EVERY_S):
                    await self._observe_now.wait()
            self._observe_now.clear()

    def _journal_full(self, why: str) -> None:
        """The raft journal cannot grow: the loop is about to wait for room (and the
        followers to elect another leader meanwhile); the metric says so at once."""
        self.fitness.failed("raft_journal", why)
        self.metrics.unfit.set(1)

    def _judge_fitness(self) -> None:
        """Step down and stand for no election while this node's writes fail."""
        unfit = self.fitness.unfit()
        before = self.raft.stepped_down
        self.raft.set_unfit(str(unfit) if unfit is not None else None)
        if unfit is not None and self.raft.stepped_down != before:
            self.metrics.stepped_down.labels(unfit.cause).inc()
        self.metrics.unfit.set(0 if unfit is None else 1)

    def _heartbeat(self, path: Path, leader: str | None, has_quorum: bool) -> None:
        """Write the heartbeat file; a full disk or an I/O error is logged, never fatal.
        While it cannot be written the pull server sees it age and lets subscribers go to
        other nodes."""
        try:
            write_sequencer_file(path, leader, has_quorum)
        except OSError as exc:
            if is_write_failure(exc):
                self.fitness.failed("heartbeat", str(exc))
            if not self._heartbeat_failing:
                log.warning(
                    "cannot write the heartbeat %s: %s; retrying every %g s",
                    path,
                    exc,
                    HEARTBEAT_EVERY_S,
                )
            self._heartbeat_failing = True
            return
        if self._heartbeat_failing:
            log.info("heartbeat %s written again", path)
        self._heartbeat_failing = False

    async def _lag_loop(self) -> None:
        """Measure how late the event loop runs a timer: raft's heartbeats and votes wait
        as long, and a lag near ``raft_min_timeout_ms`` costs an election."""
        loop = asyncio.get_running_loop()
        worst, window_end = 0.0, loop.time() + LAG_WINDOW_S
        warn_after = self.config.sequencer.raft_min_timeout_ms / 1000 / 2
        while True:
            due = loop.time() + LAG_PROBE_S
            await asyncio.sleep(LAG_PROBE_S)
            lag = max(0.0, loop.time() - due)
            worst = max(worst, lag)
            if lag > warn_after:
                log.warning(
                    "event loop ran %.0f ms late (raft waits as long; elections start at %d ms)",
                    lag * 1000,
                    self.config.sequencer.raft_min_timeout_ms,
                )
            if loop.time() >= window_end:
                self.metrics.loop_lag.set(worst)
                worst, window_end = 0.0, loop.time() + LAG_WINDOW_S

    def _walked_gauges(self) -> None:
        self._inputs()
        self._disk()
        self._holds()

    def _inputs(self) -> dict[str, Any]:
        """Per input: how far this node holds it, how far it is merged, the bytes between."""
        state = self.machine.committed()
        inputs: dict[str, Any] = {}
        for name, held in self.inputs.extents().items():
            merged = state.inputs.get(name)
            source = self.inputs.get(name)
            start = Position(merged) if merged is not None else source.first_record()
            lag = 0 if start is None else source.unmerged_bytes(start)
            inputs[name] = {"held": held, "merged": merged, "lag_bytes": lag}
            self.metrics.input_lag.labels(name).set(lag)
        return inputs

    def _holds(self) -> dict[str, dict[str, object]]:
        """Each local hold (``holds.describe``), also as gauges."""
        found = holds.describe(holds.read_holds(self.data_dir), self.merged.directory)
        for name, hold in found.items():
            behind = hold["behind_bytes"]
            self.metrics.hold_behind.labels(name).set(behind if isinstance(behind, int) else 0)
            self.metrics.hold_gap.labels(name).set(1 if hold["gap"] else 0)
        return found

    def _disk(self) -> archiver.Disk:
        disk = archiver.disk_usage(self.data_dir)
        self.metrics.disk.set(disk.percent)
        return disk

    async def status(self) -> dict[str, Any]:
        """This node's status (``rt status``): raft's part read on the loop (pysyncobj's
        state belongs to it), the files' part (directory walks, a sync) in a thread."""
        raft = self.raft.status()
        files = await asyncio.to_thread(self._file_status)
        return self._status_of(raft, *files)

    def _file_status(self) -> tuple[dict[str, Any], archiver.Disk, dict[str, Any]]:
        return self._inputs(), self._disk(), self._holds()

    def _status_of(
        self, raft: RaftStatus, inputs: dict[str, Any], disk: archiver.Disk, found: dict[str, Any]
    ) -> dict[str, Any]:
        state = self.machine.committed()
        return {
            "name": self.name,
            "software": versions.SOFTWARE,
            "protocols": {"wire": versions.WIRE_PROTOCOL, "raft": versions.RAFT_PROTOCOL},
            "raft_peer_versions": self.raft.peer_versions(),
            "role": raft.role,
            "leader": raft.leader,
            "unfit_to_lead": self.raft.unfit,
            "not_voting": self.raft.joining.describe(),
            "term": raft.term,
            "commit_index": raft.commit_index,
            "last_applied": raft.last_applied,
            "has_quorum": raft.has_quorum,
            "connected": raft.connected,
            "raft_peers": raft.peers if raft.role == "leader" else {},
            "merged_seq": self.merged.seq,
            "merged_position": self.merged.end,
            "digest": self.merger.digest,
            "committed_seq": state.seq,
            "committed_digest": state.digest,
            "pruned_below_roll": state.pruned_below,
            "rejected": state.rejected,
            "last_reject": state.last_reject or None,
            "apply_errors": self.raft.apply_errors,
            "mismatches": self.merger.mismatches,
            "fetched_inputs": self.merger.fetched_inputs,
            "planned_from_peers": self.planner.from_peers,
            "carried": self.planner.carried,
            "repaired_inputs": self.merger.repaired_inputs,
            "copied_records": self.merger.copied_records,
            "scrub": {
                "checked_files": self.merger.scrubber.checked_files,
                "damaged": self.merger.scrubber.damaged,
                "repaired": self.merger.scrubber.repaired,
            },
            "halted": self.merger.halted or None,
            "inputs": inputs,
            "disk": {
                "total_bytes": disk.total_bytes,
                "used_bytes": disk.used_bytes,
                "used_percent": round(disk.percent, 1),
            },
            "refused": dict(self.raft.refusals),
            "holds": found,
            "leases": {
                name: {**lease, "remaining_s": round(max(0, lease["until"] - wall_ns()) / 1e9, 1)}
                for name, lease in state.leases.items()
            },
        }


def _setter(event: asyncio.Event) -> Callable[[bool, str], None]:
    """A raft callback (raft's thread) that sets ``event`` on the running loop."""
    loop = asyncio.get_running_loop()

    def done(ok: bool, why: str) -> None:
        loop.call_soon_threadsafe(event.set)

    return done


@contextlib.contextmanager
def _stop_step(what: str) -> Iterator[None]:
    """One step of stopping; one slower than SLOW_STOP_STEP_S is logged, so a stop that
    outlasts its unit's timeout names the step that held it."""
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    if took > SLOW_STOP_STEP_S:
        log.warning("stopping: %s took %.1f s", what, took)
