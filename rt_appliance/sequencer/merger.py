"""The merger: carries out committed instructions, in order, on this node's merged log.

For each merge it builds the merged record from this node's copy of the input
(``in/``), checks its size and CRC against the instruction, and appends it at the
position raft decided. When the input bytes are not here (this node's push server
is behind or was cut off) it waits ``fetch_after_ms``, then fetches them from a
peer's pull server; if no peer has them any more, it copies the merged record
itself from a peer's merged log (checked against the same CRC). When a snapshot
left it without the instructions for a stretch of the log, it copies that stretch
from a peer and checks the digest where the stretch ends.

A record that matches nowhere stops the merger (it never writes bytes that differ
from the other nodes); it retries, and ``rt status`` shows the reason.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from rt_appliance import trace
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import RTError
from rt_appliance.limits import (
    FETCH_BYTES,
    FETCH_PEER_PENALTY_S,
    FRESH_KEEP_RECORDS,
    INPUT_POLL_S,
    MERGED_SYNC_EVERY_S,
    MERGER_IDLE_WAIT_S,
    MERGER_RETRY_S,
    MERGER_STOP_WAIT_S,
    SYNC_AFTER_ITEMS,
    UNBOUNDED_SCAN_RECORDS,
)
from rt_appliance.log.format import RangeHeader, encode_range
from rt_appliance.log.naming import parse_publisher_dir
from rt_appliance.log.scan import scan
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import PeerFetcher, fetch_range
from rt_appliance.sequencer.fitness import is_write_failure
from rt_appliance.sequencer.inputs import InputDir, Inputs, Records, filter_records
from rt_appliance.sequencer.machine import Committed, SequencerMachine
from rt_appliance.sequencer.merged import (
    FileChangedError,
    MergedLog,
    merged_record_size,
    parse_merged_records,
)
from rt_appliance.sequencer.scrub import Scrubber
from rt_appliance.sequencer.state import (
    ZERO_DIGEST,
    Lease,
    Merge,
    Prune,
    Skip,
    chain_digest,
    merged_header,
)

__all__ = ["Merger", "build_record", "prebuild"]

log = logging.getLogger(__name__)


def build_record(
    dir_name: str,
    start: int,
    ts: int,
    seq: int,
    source: bytes,
    watermark_before: int | None,
    records: Records | None = None,
) -> tuple[bytes, int, int | None]:
    """The merged record for input bytes ``source`` (whole records from ``start``).

    Returns (record, records kept, watermark after). The leader builds it to propose
    a merge (passing the ``records`` it has just read and checked); every node builds
    it again to carry the merge out.
    """
    if records is None:
        found = scan(source, 0, UNBOUNDED_SCAN_RECORDS, payloads=False)
        if found.stop_offset != len(source) or not found.offsets:
            raise ValueError(
                f"input bytes of {dir_name} at {Position(start)} are not whole records"
            )
        first = Position(start)
        end = first.with_offset(first.offset + len(source))
        records = Records(first, end, source, found.ids, found.offsets, found.timestamps_ns[0])
    kept, count, watermark = filter_records(records, watermark_before)
    topic, host = parse_publisher_dir(dir_name) or (dir_name, "")
    header = RangeHeader(topic, host, start, len(kept), count)
    return encode_range(header, ts, seq) + kept, count, watermark


class Merger:
    """A thread applying :attr:`SequencerMachine.pending` to :class:`MergedLog`."""

    def __init__(
        self,
        config: StreamConfig,
        node_name: str,
        machine: SequencerMachine,
        merged: MergedLog,
        inputs: Inputs,
        fetcher: PeerFetcher,
        history: Path,
        on_progress: Callable[[], None] = lambda: None,
        on_write_failure: Callable[[str], None] = lambda why: None,
        leader: Callable[[], str | None] = lambda: None,
    ) -> None:
        """``on_write_failure(why)``: the merged log could not be written (a full disk,
        EIO), from the merger's thread. ``leader()``: the raft leader's name, if known."""
        self.leader = leader
        self._failed_until: dict[str, float] = {}  # peer -> asked last until then
        self.config, self.node_name, self.machine = config, node_name, machine
        self.on_write_failure = on_write_failure
        self.merged, self.inputs, self.fetcher, self.history = merged, inputs, fetcher, history
        self.on_progress = on_progress
        self.stream = config.stream
        self.digest: str | None = ZERO_DIGEST if merged.seq == 0 else None
        self.halted = ""  # why merging is stuck, "" when it is not
        self.failure: BaseException | None = None  # what stopped the thread, if anything did
        self.fetched_inputs = 0
        self.repaired_inputs = 0  # ranges of this node's inputs rewritten from a peer's bytes
        self.copied_records = 0
        # input -> its newest file (key, size) when waiting for the push server last ran
        # out: while it is unchanged the push server is stalled and nobody waits again
        self._stalled: dict[str, tuple[tuple[int, int], int] | None] = {}
        self.scrubber = Scrubber(
            merged,
            lambda peer, at, most: fetcher.fetch(peer, "merged", at, most),
            [n.name for n in config.nodes if n.name != node_name],
            config.sequencer.scrub_interval_ms / 1000,
        )
        self.mismatches = 0
        self.pruned_files = 0
        self._stop = threading.Event()
        self._write_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="merger", daemon=True)
        self._history_below = _last_recorded_prune(history)
        self._synced_at = time.monotonic()  # the merged log's last sync (_sync_in)
        self._written = False  # carried out or copied something since (_sync_in)
        self._quiet = False  # the record just written was sent as it was applied

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread: a fetch from a peer in flight fails at once (the fetcher is
        closed), whatever the merger was carrying out is carried out again on restart."""
        self._stop.set()
        with self.machine.cond:
            self.machine.cond.notify_all()
        self.fetcher.close()
        self._thread.join(timeout=MERGER_STOP_WAIT_S)
        if self._thread.is_alive():
            log.warning("merger: its thread did not stop within %.0f s", MERGER_STOP_WAIT_S)
        self.sync()

    def sync(self) -> None:
        """Sync the merged log; what was carried out before is then no longer owed."""
        with self.machine.cond:
            count = len(self.machine.unsynced)
        self._synced_at, self._written = time.monotonic(), False
        with self._write_lock:
            self.merged.sync()
        self.machine.synced(count)

    def _sync_in(self) -> float | None:
        """Seconds until the merged log is due a sync (0: now), or None if nothing was
        written since the last. Called holding the machine's lock."""
        owed = len(self.machine.unsynced)
        if not owed and not self._written:
            return None
        if owed >= SYNC_AFTER_ITEMS:
            return 0.0
        return max(0.0, self._synced_at + MERGED_SYNC_EVERY_S - time.monotonic())

    # -- the loop -----------------------------------------------------------------

    def _run(self) -> None:
        """The thread: merge until stopped. An error no retry can mend (a failed fsync of
        the merged log, a bug) ends it; :attr:`failure` says why and the daemon stops."""
        try:
            self._merge_until_stopped()
        except BaseException as exc:
            self.failure = exc
            self.halted = f"merger stopped: {exc!r}"
            log.critical("merger: stopped by an unexpected error", exc_info=True)

    def _merge_until_stopped(self) -> None:
        while not self._stop.is_set():
            if self.scrubber.due():
                self._scrub()
            with self.machine.cond:
                sync_in = self._sync_in()
                idle = not self.machine.pending and self.machine.state.seq <= self.merged.seq
                if idle and sync_in != 0.0:
                    wait_s = min(MERGER_IDLE_WAIT_S, self.scrubber.seconds_until_due())
                    if sync_in is not None:
                        wait_s = min(wait_s, sync_in)
                    self.machine.cond.wait(max(wait_s, 0.0))
                    continue
            if sync_in == 0.0:
                self.sync()
                continue
            with self.machine.cond:
                item = self.machine.pending[0] if self.machine.pending else None
                target = self.machine.state.seq
            try:
                if item is None:  # a snapshot left no instructions for the rest: copy it
                    self._copy_stretch(target)
                else:
                    self._carry_out(item)
            except Exception as exc:
                if self._stop.is_set():
                    log.info("merger: stopped mid-instruction (%s)", exc)
                    return
                if not isinstance(exc, (RTError, OSError, ValueError)):
                    log.exception("merger: unexpected error")
                what = getattr(item.instruction, "seq", "-") if item else f"copy to {target}"
                self.halted = f"seq {what}: {exc}"
                if is_write_failure(exc):
                    self.on_write_failure(str(exc))
                log.error("merger: %s; retrying in %.0f s", self.halted, MERGER_RETRY_S)
                if isinstance(exc, FileChangedError):
                    self._scrub_newest()
                self._stop.wait(MERGER_RETRY_S)
                continue
            self.halted = ""
            self._written = True
            if item is not None:
                self.machine.done(item)
            # the pull server may send what was written before it is synced: every record
            # is a committed instruction's, so a node that loses it to a crash writes the
            # same bytes again from its raft journal (or snapshot) and its inputs. A record
            # its connections were handed as it was applied needs no second wake, unless
            # it starts a file (its header goes from the file) or this thread is so far
            # behind the applies that the pull server may no longer keep the record
            quiet = self._quiet and len(self.machine.pending) <= FRESH_KEEP_RECORDS // 2
            self._quiet = False
            if not quiet:
                self.on_progress()

    def _carry_out(self, item: Committed) -> None:
        ins = item.instruction
        if isinstance(ins, Prune):
            self._prune(ins)
            return
        if isinstance(ins, Skip):
            if self.config.archiver.prune_inputs:
                self._prune_input(ins)
            return
        if isinstance(ins, Lease):  # never queued (the state is all): nothing to write
            return
        if ins.seq <= self.merged.seq:
            if ins.seq == self.merged.seq:
                self.digest = item.digest_after
            return
        if ins.seq > self.merged.seq + 1:
            self._copy_stretch(ins.seq - 1)
            if ins.seq != self.merged.seq + 1:
                raise RTError(f"merged log at seq {self.merged.seq}, cannot reach {ins.seq - 1}")
        # the bytes the entry carries (the leader's own copy, durable with the entry
        # itself), else this node's copy of the input
        local: bytes | None
        if ins.data is not None:
            local = ins.data
            self._check_own_copy(ins, ins.data)
        else:
            local = self._local_input(ins)
        if local is None and self._input_gone(ins):  # far behind: copy merged records in bulk
            pending = self._pending_merges()
            last = ins.seq
            while last + 1 in pending:
                last += 1
            if last > ins.seq:
                try:
                    self._copy_stretch(last)
                except RTError as exc:
                    log.warning("merger: bulk copy stopped (%s); record by record", exc)
                if self.merged.seq >= ins.seq:
                    return
        record = item.record
        if record is None:
            record = self._build(ins, item.watermark_before, local)
        roll = Position(ins.position).roll
        header = merged_header(self.stream, roll, ins.ts)
        self._quiet = item.sent and roll == self.merged.roll
        with self._write_lock:
            self.merged.append(ins.position, record, header)
        trace.event("merged", "-", ins.seq, int(self.merged.end))
        self.digest = item.digest_after
        if self.config.archiver.prune_inputs:
            self._prune_input(ins)

    def _scrub_newest(self) -> None:
        """Repair the newest merged file now: it changed under the merger."""
        try:
            with self._write_lock:
                self.scrubber.check_newest()
        except Exception:  # the next retry tries again
            log.exception("scrub: unexpected error")

    def _scrub(self) -> None:
        """One step of the scrubber, between two instructions (nothing is appended meanwhile)."""
        try:
            with self._write_lock:
                self.scrubber.step()
        except Exception:  # the scrubber must never stop merging
            log.exception("scrub: unexpected error")

    # -- building a record ---------------------------------------------------------

    def _build(self, ins: Merge, watermark_before: int | None, source: bytes | None) -> bytes:
        """The merged record of ``ins``: from ``source`` (the bytes the entry carries, or
        this node's input bytes), else from a peer's input, else a peer's merged record;
        each checked against the commit."""
        if source is not None:
            record = _rebuild(ins, source, watermark_before)
            if _matches(record, ins):
                return record
            self.mismatches += 1
            log.error(
                "merger: seq %d built from local %s does not match; asking peers", ins.seq, ins.dir
            )
        for peer in self._peers():
            data = self._fetch_exact(peer, f"in/{ins.dir}", Position(ins.start), Position(ins.end))
            if data is None:
                continue
            record = _rebuild(ins, data, watermark_before)
            if _matches(record, ins):
                self.fetched_inputs += 1
                if source is not None and ins.data is None:  # this node's copy is wrong there
                    self._repair_input(ins, data, peer)
                return record
        for peer in self._peers():  # inputs gone everywhere: copy the merged record itself
            pos = Position(ins.position)
            data = self._fetch_exact(peer, "merged", pos, pos.with_offset(pos.offset + ins.nbytes))
            if data is not None and _matches(data, ins):
                self.copied_records += 1
                return data
        raise RTError(
            f"no node has input {ins.dir} {Position(ins.start)}..{Position(ins.end)} "
            "matching the committed merge"
        )

    def _repair_input(self, ins: Merge, data: bytes, peer: str) -> None:
        """Write ``peer``'s bytes (which built the committed record) over this node's
        damaged copy of them, so later reads of that input (the next merges, the planner
        when this node leads) find the right bytes, not a peer round trip each."""
        try:
            done = self.inputs.get(ins.dir).rewrite(Position(ins.start), data)
        except OSError as exc:
            log.warning(
                "merger: could not repair in/%s at %s: %s", ins.dir, Position(ins.start), exc
            )
            return
        if done:
            self.repaired_inputs += 1
            log.warning(
                "merger: repaired %d bytes of in/%s at %s with %s's (seq %d)",
                len(data),
                ins.dir,
                Position(ins.start),
                peer,
                ins.seq,
            )

    def _check_own_copy(self, ins: Merge, carried: bytes) -> None:
        """Compare this node's copy of a carried range, where it already holds it synced,
        with the bytes the entry carries (checked against the commit): a damaged copy (a
        flipped bit, a zeroed block) is counted and rewritten with them, as it is from a
        peer's bytes when the merge reads the copy itself."""
        source = self.inputs.get(ins.dir)
        start, end = Position(ins.start), Position(ins.end)
        settled = source.file_end(start)  # the push server's synced end in the newest file
        if settled is None or settled < end.offset:
            return
        own = source.read_exact(start, end)
        if own is None or own == carried:
            return
        self.mismatches += 1
        log.error("merger: seq %d: this node's copy of %s is not the entry's", ins.seq, ins.dir)
        self._repair_input(ins, carried, "the leader")

    def _local_input(self, ins: Merge) -> bytes | None:
        """The input bytes from this node's ``in/``; waits ``fetch_after_ms`` for them only
        while they may still arrive (the file is the newest one, or not there yet)."""
        source = self.inputs.get(ins.dir)
        wait_s = self.config.sequencer.fetch_after_ms / 1000
        if self._stalled.get(ins.dir) == _newest_mark(source):
            wait_s = 0.0  # nothing came since the last wait ran out: do not wait again
        deadline = time.monotonic() + wait_s
        while True:
            data = source.read_exact(Position(ins.start), Position(ins.end))
            if data is not None:
                self._stalled.pop(ins.dir, None)
                return data
            if time.monotonic() >= deadline or self._stop.is_set():
                self._stalled[ins.dir] = _newest_mark(source)
                return None
            if self._input_gone(ins):
                return None
            time.sleep(INPUT_POLL_S)

    def _input_gone(self, ins: Merge) -> bool:
        """Whether this node will never hold the input of ``ins``: a later file exists, so
        the push server is past it (it was pruned here, or this node got it from peers)."""
        key = Position(ins.start).file_key
        files = self.inputs.get(ins.dir).files()
        return bool(files) and files[-1].key > key

    def _pending_merges(self) -> dict[int, Committed]:
        with self.machine.cond:
            return {
                c.instruction.seq: c
                for c in self.machine.pending
                if isinstance(c.instruction, Merge)
            }

    def _peers(self) -> list[str]:
        """The other nodes in the order to ask them: the raft leader first (it holds what
        it committed), a peer whose last fetch failed in the last FETCH_PEER_PENALTY_S
        last. A paused or cut-off node answers nothing, and each fetch from it waits out
        FETCH_TIMEOUT_S: asked first, it held a restarted follower back 10 s."""
        names = [n.name for n in self.config.nodes if n.name != self.node_name]
        leader, now = self.leader(), time.monotonic()
        return sorted(names, key=lambda n: (self._failed_until.get(n, 0.0) > now, n != leader))

    def _fetch_exact(
        self, peer: str, directory: str, start: Position, end: Position
    ) -> bytes | None:
        try:
            return fetch_range(self.fetcher, peer, directory, start, end, self._stop.is_set)
        except RTError as exc:  # stopping: the instruction is carried out on restart
            log.info("merger: fetch of %s from %s failed: %s", directory, peer, exc)
            self._failed_until[peer] = time.monotonic() + FETCH_PEER_PENALTY_S
            return None

    # -- copying a stretch of merged log (after a snapshot) ---------------------------

    def _copy_stretch(self, target_seq: int) -> None:
        """Copy merged records up to ``target_seq`` from a peer."""
        if target_seq <= self.merged.seq:
            return
        log.info(
            "merger: copying merged log seq %d..%d from a peer", self.merged.seq + 1, target_seq
        )
        for peer in self._peers():
            try:
                self._copy_from(peer, target_seq)
            except RTError as exc:
                log.warning("merger: copy from %s stopped: %s", peer, exc)
            if self.merged.seq >= target_seq:
                restored = self.machine.restored
                done = restored is not None and restored[0] == self.merged.seq
                if done and self.digest and restored is not None and restored[1] != self.digest:
                    raise RTError(f"copied log digest {self.digest} != committed {restored[1]}")
                return
        raise RTError(f"no peer could give merged records up to seq {target_seq}")

    def _copy_from(self, peer: str, target_seq: int) -> None:
        expected = self._pending_merges()
        if self.merged.roll < 0:
            first = self.fetcher.fetch(peer, "merged", Position.of(1, 0, 0), 0)
            at = first.oldest if first.oldest is not None else Position.of(1, 0, 0)
            self.digest = ZERO_DIGEST if at.roll == 0 else None
        else:
            at = Position(self.merged.end)
        while self.merged.seq < target_seq and not self._stop.is_set():
            got = self.fetcher.fetch(peer, "merged", at, FETCH_BYTES)
            if got.missing and self._pruned_everywhere(at, got.oldest):
                assert got.oldest is not None
                at = self._drop_pruned(got.oldest)
                continue
            if got.missing:
                raise RTError(f"{peer} no longer has {at}")
            base = at.offset
            body, header_len = got.data, 0
            if at.offset == 0 and body:
                from rt_appliance.log.format import decode_file_header

                header = decode_file_header(body[:1024])
                if isinstance(header, str):
                    raise RTError(f"{peer}'s merged file at {at}: {header}")
                header_len = header.header_bytes
            records, _, problem = parse_merged_records(body[header_len:], base + header_len)
            size = merged_record_size(body, header_len) if problem == "incomplete" else None
            if not records and size is not None and header_len + size > len(body):
                # one record larger than a fetch: ask for it whole, in as many fetches as it takes
                whole = self._fetch_exact(
                    peer, "merged", at, at.with_offset(base + header_len + size)
                )
                if whole is None:
                    raise RTError(f"{peer} could not give the {size}-byte merged record at {at}")
                body = whole
                records, _, _ = parse_merged_records(body[header_len:], base + header_len)
            within = [r for r in records if r.seq <= target_seq]
            if not within and records and self._starts_at_kept(at, records[0].seq):
                log.warning(
                    "merger: merged records up to seq %d are pruned on every node; this "
                    "node's merged log starts at %s's oldest file (%s, seq %d on)",
                    target_seq,
                    peer,
                    at,
                    records[0].seq,
                )
                within = records
            records = within
            if not records:
                if got.next_file is not None and got.file_size == at.offset + len(body):
                    at = got.next_file
                    continue
                raise RTError(f"{peer} has nothing new at {at}")
            upto = records[-1].offset + records[-1].nbytes - base
            for r in records:
                pos = int(Position.of(1, at.roll, r.offset))
                known = expected.get(r.seq)
                if known is not None:  # the committed instruction says what this record is
                    ins = known.instruction
                    assert isinstance(ins, Merge)
                    if (ins.position, ins.nbytes, ins.crc) != (pos, r.nbytes, r.crc):
                        raise RTError(f"{peer}'s merged record {r.seq} differs from the commit")
                    self.digest = known.digest_after
                elif self.digest is not None:
                    self.digest = chain_digest(self.digest, r.seq, pos, r.nbytes, r.crc)
            with self._write_lock:
                self.merged.append_raw(at.roll, at.offset, body[:upto], records[-1].seq)
                trace.event("merged", "-", records[-1].seq, int(self.merged.end))
            self.copied_records += len(records)
            at = at.with_offset(at.offset + upto)

    def _pruned_everywhere(self, at: Position, oldest: Position | None) -> bool:
        """Whether ``at`` (where this node's log ends) lies in files the stream has
        pruned by a committed decision, and the peer's log starts after it: then no
        node will ever give those records again, and none is owed."""
        pruned_below = self.machine.committed().pruned_below
        return oldest is not None and at.roll < pruned_below and oldest.roll > at.roll

    def _starts_at_kept(self, at: Position, first_seq: int) -> bool:
        """Whether this node's merged log, empty (never written, or dropped by
        :meth:`_drop_pruned`), must start at ``at``: the start of a peer's file whose first
        record is ``first_seq``, with every record before it in files the stream pruned
        by a committed decision. No node will give those records again (a snapshot's
        target among them included), so the log starts with what is kept."""
        return (
            self.merged.roll < 0
            and at.offset == 0
            and first_seq > self.merged.seq + 1
            and at.roll <= self.machine.committed().pruned_below
        )

    def _drop_pruned(self, oldest: Position) -> Position:
        """This node's merged files end below what the stream keeps (it was down, or
        cut back after damage, while the archiver pruned): they go, and the copy starts
        again at the peer's oldest file. Returns where."""
        with self._write_lock:
            removed = self.merged.reset()
        log.warning(
            "merger: this node's merged log ends before what the stream keeps (pruned "
            "below roll %d); dropping %s and copying from %s",
            self.machine.committed().pruned_below,
            [p.name for p in removed] or "nothing",
            oldest,
        )
        self.digest = None  # the records before the copy are not here to chain
        return oldest

    # -- pruning -------------------------------------------------------------------

    def _prune(self, ins: Prune) -> None:
        with self._write_lock:
            removed = self.merged.delete_below(ins.below)
        self.pruned_files += len(removed)
        if ins.below <= self._history_below:
            return  # replayed after a restart: recorded already
        self._history_below = ins.below
        entry = {
            "time_ns": ins.ts,
            "pruned_below_roll": ins.below,
            "reason": ins.reason,
            "removed": [p.name for p in removed],
            "node": self.node_name,
        }
        with open(self.history, "a") as f:
            f.write(json.dumps(entry) + "\n")
        log.info(
            "archiver: pruned merged files below roll %d (%s): %s",
            ins.below,
            ins.reason,
            [p.name for p in removed] or "none here",
        )

    def _prune_input(self, ins: Merge | Skip) -> None:
        start = Position(ins.start)
        for f in self.inputs.get(ins.dir).files()[:-1]:
            if f.key < start.file_key:
                f.path.unlink(missing_ok=True)
                log.info("archiver: removed fully merged input %s", f.path)


def prebuild(ins: Merge, watermark_before: int | None) -> bytes | None:
    """The merged record of ``ins`` from the input bytes it carries, if it matches the
    commit and holds a publisher record (None: the merger builds it, or finds it
    elsewhere). Called as the merge is applied, on the thread raft applies on."""
    if ins.data is None or ins.count == 0:
        return None
    record = _rebuild(ins, ins.data, watermark_before)
    return record if _matches(record, ins) else None


def _matches(record: bytes, ins: Merge) -> bool:
    return len(record) == ins.nbytes and zlib.crc32(record) == ins.crc


def _rebuild(ins: Merge, source: bytes, watermark_before: int | None) -> bytes:
    """The record of ``ins`` from input bytes ``source``; the caller checks it with
    :func:`_matches`.

    Without a dedup watermark every record is kept, so the record is the range header
    and the input bytes as they are: no record needs parsing, and the CRC of the whole
    record, compared with the committed one, checks every byte at once.
    """
    if watermark_before is None:
        topic, host = parse_publisher_dir(ins.dir) or (ins.dir, "")
        header = RangeHeader(topic, host, ins.start, len(source), ins.count)
        return encode_range(header, ins.ts, ins.seq) + source
    try:
        return build_record(ins.dir, ins.start, ins.ts, ins.seq, source, watermark_before)[0]
    except ValueError:  # damaged bytes: no record, so another source is tried
        return b""


def _last_recorded_prune(history: Path) -> int:
    """The highest ``pruned_below_roll`` in the log-history file (0: none)."""
    try:
        lines = history.read_text().splitlines()
    except FileNotFoundError:
        return 0
    below = 0
    for line in lines:
        try:
            below = max(below, int(json.loads(line)["pruned_below_roll"]))
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line from a crash
    return below


def _newest_mark(source: InputDir) -> tuple[tuple[int, int], int] | None:
    """(key, size) of the newest file of an input: changes whenever the push server writes."""
    files = source.files()
    if not files:
        return None
    try:
        return files[-1].key, files[-1].path.stat().st_size
    except FileNotFoundError:
        return None
