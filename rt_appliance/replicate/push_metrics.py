"""Prometheus metrics of push replication (one registry per process)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["DirMetrics", "PushMetrics"]


@dataclass(frozen=True, slots=True)
class DirMetrics:
    """The series of one node and directory, looked up once (``labels`` per frame costs
    a lock and a tuple of label values)."""

    bytes: Counter
    chunks: Counter
    acked_position: Gauge


class PushMetrics:
    """Counters and gauges of a push client or push server, served over HTTP."""

    def __init__(self, side: str) -> None:
        self.registry = CollectorRegistry()
        prefix = f"rt_push_{side}"
        labels = ["node", "dir"]
        self.bytes = Counter(
            f"{prefix}_bytes", "Bytes of records replicated", labels, registry=self.registry
        )
        self.records = Counter(
            f"{prefix}_records", "Records replicated", labels, registry=self.registry
        )
        self.chunks = Counter(
            f"{prefix}_chunks",
            "DATA frames replicated (records / chunks: how many writes one send carries)",
            labels,
            registry=self.registry,
        )
        self.lag_bytes = Gauge(
            f"{prefix}_lag_bytes",
            "Bytes the node has not acknowledged yet (client) or not received (server, as offered)",
            labels,
            registry=self.registry,
        )
        self.acked_position = Gauge(
            f"{prefix}_acked_position", "Last acknowledged position", labels, registry=self.registry
        )
        self.connected = Gauge(
            f"{prefix}_connected", "1 while a connection is up", ["node"], registry=self.registry
        )
        self.reconnects = Counter(
            f"{prefix}_reconnects", "Connections lost or failed", ["node"], registry=self.registry
        )
        self.rejected = Counter(
            f"{prefix}_rejected_connections",
            "Connections refused",
            ["reason"],
            registry=self.registry,
        )
        self.refused_chunks = Counter(
            f"{prefix}_refused_chunks",
            "Chunks received and not kept: disk_full, corrupt (a bad record, or the "
            "replica's own data), error (any other write failure), sync_failed (cut back "
            "to the last good sync)",
            ["dir", "reason"],
            registry=self.registry,
        )
        self.repaired = Counter(
            f"{prefix}_repaired_replicas",
            "Replicas found damaged (a bad record followed by valid ones) when opened: kept "
            "under .damaged/, cut before the damage and sent again (push server only)",
            registry=self.registry,
        )
        self.stuck = Gauge(
            f"{prefix}_stuck",
            "1 while a node keeps refusing the same bytes (the same reason at the same place, "
            "5 connections in a row, nothing acknowledged): where, and the node's reason",
            ["node", "dir", "file", "offset", "reason"],
            registry=self.registry,
        )
        self.stuck_total = Counter(
            f"{prefix}_stuck_episodes",
            "Times a connection became stuck on bytes a node keeps refusing",
            ["node"],
            registry=self.registry,
        )
        self._dirs: dict[tuple[str, str], DirMetrics] = {}
        self._records: dict[tuple[str, str], Counter] = {}
        self.deleted_files = Counter(
            f"{prefix}_deleted_files",
            "Publisher files deleted after every node acknowledged them",
            ["dir"],
            registry=self.registry,
        )

    def of(self, node: str, d: str) -> DirMetrics:
        """The series of node ``node`` and directory ``d``."""
        found = self._dirs.get((node, d))
        if found is None:
            labels = {"node": node, "dir": d}
            found = DirMetrics(
                self.bytes.labels(**labels),
                self.chunks.labels(**labels),
                self.acked_position.labels(**labels),
            )
            self._dirs[(node, d)] = found
        return found

    def records_of(self, node: str, d: str) -> Counter:
        """The records counter of node ``node`` and directory ``d`` (the client's)."""
        found = self._records.get((node, d))
        if found is None:
            found = self._records[(node, d)] = self.records.labels(node=node, dir=d)
        return found
