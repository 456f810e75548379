"""The archiver's policy (KX's): which rolled merged files to prune, and why.

Three rules, each optional but the last: files older than ``retention_minutes``
(by the first timestamp in the file), a total merged-log size above
``max_log_bytes``, and the data filesystem above ``max_disk_usage_percent``. Only
rolled files are pruned, never the newest. The leader evaluates the policy; raft
commits the decision; every node prunes the same files.

Holds (:mod:`rt_appliance.sequencer.holds`) cap the first two rules: no file a
consumer on any node has not committed is pruned for age or size. The disk rule
overrides them, since a full disk stops the whole stream; the reason then says so,
and the consumer finds the gap when it next reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.config.model import ArchiverConfig
from rt_appliance.limits import MAX_FILE_HEADER_BYTES
from rt_appliance.log.format import decode_file_header
from rt_appliance.log.segments import list_files

__all__ = ["Disk", "MergedFile", "decide", "disk_usage", "merged_files"]


@dataclass(frozen=True, slots=True)
class MergedFile:
    roll: int
    first_ts_ns: int
    size: int


@dataclass(frozen=True, slots=True)
class Disk:
    total_bytes: int
    used_bytes: int

    @property
    def percent(self) -> float:
        return 100.0 * self.used_bytes / self.total_bytes if self.total_bytes else 0.0


def merged_files(directory: Path) -> list[MergedFile]:
    """The merged log's files, oldest first (first timestamp = the file header's)."""
    found = []
    for f in list_files(directory):
        try:
            with open(f.path, "rb") as fh:
                header = decode_file_header(fh.read(MAX_FILE_HEADER_BYTES))
                size = os.fstat(fh.fileno()).st_size
        except FileNotFoundError:
            continue
        if not isinstance(header, str):
            found.append(MergedFile(f.roll, header.created_ns, size))
    return found


def disk_usage(path: Path) -> Disk:
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    return Disk(total, total - st.f_bavail * st.f_frsize)


def decide(
    files: list[MergedFile],
    now_ns: int,
    disk: Disk,
    policy: ArchiverConfig,
    hold_roll: int | None = None,
) -> tuple[int, str] | None:
    """``(below, reason)``: prune rolls below ``below``; None when nothing is due.

    ``hold_roll`` is the oldest roll a hold still needs (:func:`holds.oldest_roll`).
    """
    rolled = files[:-1]  # never the newest
    if not rolled:
        return None
    below, reasons = rolled[0].roll, []
    if policy.retention_minutes is not None:
        cutoff = now_ns - int(policy.retention_minutes * 60e9)
        old = [f for f in rolled if f.first_ts_ns < cutoff]
        if old:
            below = max(below, old[-1].roll + 1)
            reasons.append(f"older than {policy.retention_minutes:g} min")
    if policy.max_log_bytes is not None:
        total = sum(f.size for f in files)
        cut = _oldest_until(rolled, total - policy.max_log_bytes)
        if cut is not None:
            below = max(below, cut)
            reasons.append(f"merged log above {policy.max_log_bytes} bytes")
    if hold_roll is not None and below > hold_roll:
        below = max(rolled[0].roll, hold_roll)
        reasons = [f"{r} (up to the hold at roll {hold_roll})" for r in reasons]
    limit = disk.total_bytes * policy.max_disk_usage_percent / 100
    cut = _oldest_until(rolled, int(disk.used_bytes - limit))
    if cut is not None and disk.used_bytes > limit:
        below = max(below, cut)
        reason = f"disk above {policy.max_disk_usage_percent:g}%"
        if hold_roll is not None and cut > hold_roll:
            reason += f", overriding the hold at roll {hold_roll}: rolls {hold_roll}..{cut - 1} "
            reason += "are pruned before their consumer committed them"
        reasons.append(reason)
    if not reasons or below <= rolled[0].roll:
        return None
    return below, "; ".join(reasons)


def _oldest_until(rolled: list[MergedFile], excess: int) -> int | None:
    """The roll to prune below so that at least ``excess`` bytes go (or all rolled files)."""
    if excess <= 0:
        return None
    freed = 0
    for f in rolled:
        freed += f.size
        if freed >= excess:
            return f.roll + 1
    return rolled[-1].roll + 1
