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
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.clock import wall_ns
from rt_appliance.errors import UsageError
from rt_appliance.log.segments import bytes_after, fsync_dir, list_files
from rt_appliance.position import Position

__all__ = [
    "HOLDS_DIR",
    "Hold",
    "describe",
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
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(body + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


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
