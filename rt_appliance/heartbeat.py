"""The sequencer's heartbeat file: who leads, and whether this node's merged log can grow.

A node's sequencer replaces ``<data_dir>/sequencer.json`` every second, and at once when
the leader or the quorum it sees changes; the node's pull server reads it to name the
leader in TOPOLOGY answers and to tell subscribers when the merged log it serves has
stopped growing (its sequencer silent or without a quorum). A file rather than a call:
a pull server serving a merged log with no sequencer beside it (one started alone)
reads the same, and a file's age shows a sequencer that stopped. It lives below both
``sequencer`` (the writer) and ``replicate`` (the reader), so that neither borrows the
other's internals for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rt_appliance.clock import wall
from rt_appliance.config.model import HostRole, NodeConfig, StreamConfig
from rt_appliance.limits import SEQUENCER_STALE_S

__all__ = [
    "known_leader",
    "merged_log_stale",
    "sequencer_file",
    "write_sequencer_file",
]


def sequencer_file(config: StreamConfig, node: NodeConfig) -> Path:
    """Where a node's sequencer says, every second, who leads and whether it has quorum."""
    return config.data_dir_of(node) / "sequencer.json"


def write_sequencer_file(path: Path, leader: str | None, has_quorum: bool) -> None:
    """The sequencer's heartbeat (atomically replaced)."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(json.dumps({"leader": leader, "has_quorum": has_quorum, "time": wall()}))
    tmp.replace(path)


def _sequencer_state(config: StreamConfig, node: NodeConfig) -> dict[str, Any] | None:
    try:
        doc = json.loads(sequencer_file(config, node).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def known_leader(config: StreamConfig, node: NodeConfig) -> str | None:
    """The leader as this node's sequencer last saw it (None: unknown or no sequencer)."""
    doc = _sequencer_state(config, node)
    name = doc.get("leader") if doc else None
    return name if isinstance(name, str) and config.role_of(name) is HostRole.NODE else None


def merged_log_stale(config: StreamConfig, node: NodeConfig) -> str | None:
    """Why this node's merged log cannot grow now (its sequencer silent or without quorum),
    or None. A node that never ran a sequencer is never called stale."""
    doc = _sequencer_state(config, node)
    if doc is None:
        return None
    age = wall() - float(doc.get("time", 0))
    if age > SEQUENCER_STALE_S:
        return f"its sequencer has been silent for {age:.0f}s"
    if not doc.get("has_quorum"):
        return "its sequencer has no quorum"
    return None
