"""Holds: how far a consumer on a node (the Spark pipeline) has committed the merged log.

A consumer that reads a node's merged log in place, rather than through a pull
client, keeps a hold file there; the archiver prunes no merged file at or after
the oldest hold of any node unless the disk limit forces it
(:func:`rt_appliance.sequencer.archiver.decide`). Followers send their holds to
the leader with their extent reports.

One file per consumer, replaced atomically (write, fsync, rename, fsync the
directory)::

    <data_dir>/holds/<name>.json   {"position": 1234, "updated_ns": 1700000000000000000}

``position`` is the merged-log position the consumer resumes from: every record
before it is committed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.clock import wall_ns
from rt_appliance.errors import UsageError
from rt_appliance.log.segments import bytes_after, fsync_dir, list_files
from rt_appliance.position import Position

__all__ = [
    "HOLDS_DIR",
    "Hold",
    "LeaderHolds",
    "describe",
    "directory_version",
    "hold_path",
    "oldest_roll",
    "read_holds",
    "write_hold",
]

log = logging.getLogger(__name__)

HOLDS_DIR = "holds"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class Hold:
    name: str
    position: Position
    updated_ns: int


def hold_path(data_dir: Path, name: str) -> Path:
    """The hold file of consumer ``name`` in a node's data directory."""
    if not _NAME.fullmatch(name):
        raise UsageError(f"hold name {name!r}: 1-64 letters, digits, '_', '.', '-'")
    return data_dir / HOLDS_DIR / f"{name}{_SUFFIX}"


def write_hold(path: Path, position: Position | int) -> None:
    """Record durably that everything before ``position`` is committed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"position": int(position), "updated_ns": wall_ns()})
    # one temporary name per writer: the pipeline's driver and Spark's source (another
    # process) both move the pipeline's hold, and a shared name lets one's rename take
    # the other's file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as f:
        f.write(body + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def directory_version(data_dir: Path) -> tuple[int, int] | None:
    """The holds directory's inode and change time: a hold written (renamed into place)
    changes it. None while there is no directory."""
    try:
        st = os.stat(data_dir / HOLDS_DIR)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def read_holds(data_dir: Path) -> list[Hold]:
    """Every hold of the node whose data directory is ``data_dir``; unreadable ones are
    logged and skipped (a consumer rewrites its file at every commit)."""
    directory = data_dir / HOLDS_DIR
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    holds = []
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        try:
            fields = json.loads((directory / name).read_text())
            holds.append(
                Hold(
                    name.removesuffix(_SUFFIX),
                    Position.parse(fields["position"]),
                    int(fields.get("updated_ns", 0)),
                )
            )
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("holds: ignoring %s: %s", directory / name, exc)
    return holds


def oldest_roll(positions: list[int]) -> int | None:
    """The lowest merged roll any hold still needs (files from it on stay), or None."""
    if not positions:
        return None
    return min(Position(p).roll for p in positions)


class LeaderHolds:
    """The leader's view of every node's holds: its own files, and what the others
    reported. A node it has not heard from yet holds everything, for ``wait_s`` after
    it took the lead: a new leader must not prune what a follower's consumer still
    needs only because that follower's first report is still on its way."""

    def __init__(self, me: str, nodes: list[str], wait_s: float) -> None:
        self.me, self.nodes, self.wait_s = me, nodes, wait_s
        self.reported: dict[str, dict[str, int]] = {}
        self.led_since: float | None = None

    def report(self, node: str, node_holds: dict[str, int]) -> None:
        self.reported[node] = node_holds

    def leading(self, now: float | None) -> None:
        """``now`` (monotonic) while this node leads, None while it does not."""
        if now is None:
            self.led_since = None
        elif self.led_since is None:
            self.led_since = now

    def unreported(self) -> list[str]:
        return [n for n in self.nodes if n != self.me and n not in self.reported]

    def oldest_roll(self, own: list[int], first_roll: int, now: float) -> int | None:
        """The oldest merged roll still needed on any node (``first_roll``, the oldest
        present, while some node's holds are unknown), or None for no hold."""
        unreported = self.unreported()
        led_for = now - self.led_since if self.led_since is not None else 0.0
        if unreported and led_for < self.wait_s:
            log.debug("archiver: holds of %s not reported yet", ", ".join(unreported))
            return first_roll
        positions = list(own)
        for node, node_holds in self.reported.items():
            if node != self.me:
                positions.extend(node_holds.values())
        return oldest_roll(positions)


def describe(found: list[Hold], merged_dir: Path) -> dict[str, dict[str, object]]:
    """Each hold for ``rt status``: its position, the merged bytes after it, and the gap
    when files it had not committed were pruned (the disk limit overrode it)."""
    files = list_files(merged_dir)
    oldest = files[0].roll if files else None
    described: dict[str, dict[str, object]] = {}
    for hold in found:
        p = hold.position
        gap = None
        if oldest is not None and p != 0 and p.roll < oldest:
            gap = f"merged rolls {p.roll}..{oldest - 1} were pruned before {hold.name} "
            gap += "committed them"
        described[hold.name] = {
            "position": int(p),
            "behind_bytes": bytes_after(merged_dir, p.session, p.roll, p.offset) if p else None,
            "updated_ns": hold.updated_ns,
            "gap": gap,
        }
    return described
