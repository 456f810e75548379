"""The scrubber: finds damage in this node's merged log while it runs, and repairs it
from a peer's identical bytes.

Every merged record carries a CRC-32, and every node's merged log is byte-identical,
so a damaged stretch (a flipped bit, a zeroed block, a file cut short: bit rot, a bad
block, a stray write) can be found by walking the file and rewritten from any peer.
Every ``sequencer.scrub_interval_ms`` the scrubber begins to check the next merged file
in turn (the newest one up to what the merger has written). The merger's thread walks
it in steps (:meth:`Scrubber.step`) of ``SCRUB_STEP_BYTES`` at most, one per
``SCRUB_STEP_GAP_S``, between its appends: a whole file at once held the merges up for
as long as its walk took (a second for 4 MiB on a busy 2-core machine, the largest
part of the stalls one node's fault caused in ``rt chaos``). When the walk finds a
problem, or ends anywhere but on a whole range at the file's end, the file is checked
whole (:func:`verify_file`) and, if it is damaged, the bytes from the damage on are
fetched from a peer (``FETCH merged``), written in place, synced, and the file is
checked again. A repair that does not check out is tried with the next peer; if none
works the file is reported again at the next pass. The merger does not append while a
step runs (same thread), and pull servers and subscribers refuse bytes whose CRC
fails, so damage never travels.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rt_appliance.errors import RTError
from rt_appliance.limits import (
    FETCH_BYTES,
    MAX_FILE_HEADER_BYTES,
    SCRUB_STEP_BYTES,
    SCRUB_STEP_GAP_S,
)
from rt_appliance.log.format import decode_file_header
from rt_appliance.log.merged_walk import MergedWalk
from rt_appliance.log.recovery import verify_file
from rt_appliance.log.segments import StreamFile
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import Fetched
from rt_appliance.sequencer.merged import MergedLog

__all__ = ["Damage", "Scrubber"]

log = logging.getLogger(__name__)

Fetch = Callable[[str, Position, int], Fetched]  # (peer, position, max bytes) -> answer


@dataclass(frozen=True, slots=True)
class Damage:
    file: StreamFile
    offset: int  # the first byte that does not check out
    expected: int | None  # the file's size if known here (the newest file), else None
    reason: str


class Scrubber:
    def __init__(
        self, merged: MergedLog, fetch: Fetch, peers: Sequence[str], interval_s: float
    ) -> None:
        self.merged, self.fetch, self.peers = merged, fetch, list(peers)
        self.interval_s = interval_s
        self._next_at = time.monotonic() + interval_s
        self._after: tuple[int, int] | None = None  # key of the file checked last
        self._walk: MergedWalk | None = None  # the check under way, a step at a time
        self._walking: StreamFile | None = None  # the file it checks
        self._next_step_at = 0.0
        self.checked_files = 0
        self.damaged = 0  # damage found
        self.repaired = 0  # damage repaired from a peer

    def due(self) -> bool:
        return self.seconds_until_due() <= 0

    def seconds_until_due(self) -> float:
        """How long until the next step is due (the merger's idle wait ends then)."""
        if self.interval_s <= 0:
            return math.inf
        at = self._next_step_at if self._walk is not None else self._next_at
        return at - time.monotonic()

    def check_newest(self) -> Damage | None:
        """Check the newest merged file now (the merger found it changed under it), and
        repair it if damaged. Returns the damage found."""
        files = self.merged.files()
        if not files:
            return None
        return self._check(files[-1], True)

    def step(self, budget: int = SCRUB_STEP_BYTES) -> Damage | None:
        """Walk the file being checked on by about ``budget`` bytes, beginning the next
        file in turn if none is; once its walk ends, judge it and repair it if damaged.
        Returns the damage found (None: none, or the walk goes on)."""
        now = time.monotonic()
        self._next_step_at = now + SCRUB_STEP_GAP_S
        if self._walk is None or self._walking is None:
            self._next_at = now + self.interval_s
            files = self.merged.files()
            if not files:
                return None
            later = [f for f in files if self._after is None or f.key > self._after]
            self._walking = (later or files)[0]
            self._after = self._walking.key
            self._walk = MergedWalk(self._walking.path)
        current, walk = self._walking, self._walk
        try:
            walk.advance(budget)
        except FileNotFoundError:  # pruned meanwhile
            self._walk = self._walking = None
            return None
        if not walk.done:
            return None
        self._walk = self._walking = None
        files = self.merged.files()
        newest = bool(files) and current.key == files[-1].key
        whole = not walk.problem and walk.range_left == 0
        if whole and walk.offset == self._expected(current, newest):
            self.checked_files += 1
            return None
        return self._check(current, newest)  # the whole file, to say where and what

    def _expected(self, f: StreamFile, newest: bool) -> int:
        """Where a file that checks out ends: what the merger wrote to the newest file,
        the file's size for an older one."""
        return self.merged.size if newest and f.roll == self.merged.roll else _size(f)

    def _check(self, current: StreamFile, newest: bool) -> Damage | None:
        self.checked_files += 1
        damage = self.inspect(current, newest)
        if damage is not None:
            self.damaged += 1
            log.error(
                "scrub: %s damaged at offset %d (%s); repairing from a peer",
                current.path,
                damage.offset,
                damage.reason,
            )
            if self.repair(damage):
                self.repaired += 1
        return damage

    def inspect(self, f: StreamFile, newest: bool) -> Damage | None:
        """Where ``f`` stops checking out, if it does. The newest file is checked up to
        what the merger has written to it; an older one must end on a whole record."""
        try:
            report = verify_file(f.path)
        except FileNotFoundError:  # pruned meanwhile
            return None
        expected = self.merged.size if newest and f.roll == self.merged.roll else None
        if report.error is not None:
            return Damage(f, report.error.offset, expected, report.error.reason)
        if expected is not None and report.valid_bytes < expected:
            return Damage(f, report.valid_bytes, expected, "shorter than what was written")
        if expected is not None and _size(f) > expected:  # bytes nobody merged: cut them
            return Damage(f, expected, expected, "longer than what was written")
        if expected is None and report.tail.kind != "clean":
            return Damage(f, report.valid_bytes, None, report.tail.reason or report.tail.kind)
        return None

    def repair(self, damage: Damage) -> bool:
        """Rewrite ``damage.file`` from ``damage.offset`` with a peer's bytes; if no
        peer's bytes fit there, from the file's start.

        A walk finds the first place the file stops making sense, which is not always
        where it stopped being the stream's: a record's length field can carry the walk
        over a cut and a stretch written after it, to a boundary that is this file's
        but not the others'. A peer's bytes from there then never check out; the whole
        file from a peer always does."""
        f = damage.file
        if self._repair_from(f, damage.offset, damage.expected):
            return True
        start = _first_record(f)
        if start is None or start >= damage.offset:
            return False
        log.error(
            "scrub: %s: no peer's bytes fit at offset %d; rewriting it from offset %d",
            f.path.name,
            damage.offset,
            start,
        )
        return self._repair_from(f, start, damage.expected)

    def _repair_from(self, f: StreamFile, offset: int, expected: int | None) -> bool:
        for peer in self.peers:
            try:
                data = self._fetch_rest(peer, f, offset, expected)
            except RTError as exc:
                log.info("scrub: fetching %s from %s failed: %s", f.path.name, peer, exc)
                continue
            if data is None:
                continue
            _rewrite(f, offset, data)
            if self.inspect(f, expected is not None) is None:
                log.warning(
                    "scrub: repaired %s from offset %d with %d bytes from %s",
                    f.path,
                    offset,
                    len(data),
                    peer,
                )
                return True
            log.error("scrub: %s from %s does not check out either", f.path.name, peer)
        return False

    def _fetch_rest(
        self, peer: str, f: StreamFile, offset: int, expected: int | None
    ) -> bytes | None:
        """The peer's bytes of ``f`` from ``offset`` to ``expected`` (or its file's end)."""
        chunks: list[bytes] = []
        at = offset
        while True:
            want = FETCH_BYTES if expected is None else min(FETCH_BYTES, expected - at)
            if want <= 0:
                break
            got = self.fetch(peer, Position.of(f.session, f.roll, at), want)
            if got.missing:
                return None
            chunks.append(got.data)
            at += len(got.data)
            end = got.file_size if expected is None else expected
            if at >= end or not got.data:
                if expected is not None and at < expected:
                    return None  # the peer does not have all of it yet
                break
        return b"".join(chunks)


def _size(f: StreamFile) -> int:
    try:
        return f.path.stat().st_size
    except FileNotFoundError:
        return 0


def _first_record(f: StreamFile) -> int | None:
    """Where ``f``'s records start (after its header); None if it has no valid header."""
    try:
        with open(f.path, "rb") as fh:
            header = decode_file_header(fh.read(MAX_FILE_HEADER_BYTES))
    except FileNotFoundError:
        return None
    return None if isinstance(header, str) else header.header_bytes


def _rewrite(f: StreamFile, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` (not through the merger's append-only descriptor),
    cut the file after it, and sync."""
    fd = os.open(f.path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        at = offset
        while view:
            n = os.pwrite(fd, view, at)
            view, at = view[n:], at + n
        os.ftruncate(fd, offset + len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
