"""``rt replication status``: each replication connection's state and lag, from daemon metrics.

Each daemon serves Prometheus metrics; this reads them over HTTP (the same
numbers a monitoring system sees), so it works from any host that can reach
the metrics ports, and shows a daemon that does not answer as ``unreachable``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from prometheus_client.parser import text_string_to_metric_families

from rt_appliance.config.model import StreamConfig
from rt_appliance.limits import METRICS_SCRAPE_TIMEOUT_S

__all__ = ["ConnectionStatus", "collect_status", "scrape"]

Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True, slots=True)
class ConnectionStatus:
    """One replication connection (or one daemon that could not be asked)."""

    kind: str  # push | pull
    client: str
    node: str
    dir: str
    state: str  # connected | disconnected | unreachable
    acked_position: int | None
    lag_bytes: int | None
    problem: str = ""  # why a stuck connection is stuck: file, offset and the peer's reason

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def scrape(host: str, port: int) -> Samples | None:
    """``{metric name: [(labels, value)]}`` from ``http://host:port/metrics``, or None."""
    try:
        with urllib.request.urlopen(
            f"http://{host}:{port}/metrics", timeout=METRICS_SCRAPE_TIMEOUT_S
        ) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    for sample_labels, value in samples.get(name, []):
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            return value
    return None


def _stuck(samples: Samples, node: str, d: str) -> str:
    """Where and why a push client is stuck on ``node`` for directory ``d`` ("" if not)."""
    for labels, value in samples.get("rt_push_client_stuck", []):
        if value and labels.get("node") == node and labels.get("dir") == d:
            return f"{labels['file']} offset {labels['offset']}: {labels['reason']}"
    return ""


def _push_rows(config: StreamConfig) -> list[ConnectionStatus]:
    rows = []
    for pub in config.publishers:
        samples = scrape(pub.host, config.ports.push_client_metrics)
        dirs = [f"{t}.{pub.name}" for t in pub.topics]
        for node in config.nodes:
            for d in dirs:
                if samples is None:
                    rows.append(
                        ConnectionStatus("push", pub.name, node.name, d, "unreachable", None, None)
                    )
                    continue
                up = _value(samples, "rt_push_client_connected", node=node.name)
                acked = _value(samples, "rt_push_client_acked_position", node=node.name, dir=d)
                lag = _value(samples, "rt_push_client_lag_bytes", node=node.name, dir=d)
                stuck = _stuck(samples, node.name, d)
                state = "stuck" if stuck else "connected" if up else "disconnected"
                rows.append(
                    ConnectionStatus(
                        "push",
                        pub.name,
                        node.name,
                        d,
                        state,
                        None if acked is None else int(acked),
                        None if lag is None else int(lag),
                        stuck,
                    )
                )
    return rows


def _node_samples(config: StreamConfig, host: str) -> Samples | None:
    """A node's metrics: ``rt node`` serves all of them on ``ports.sequencer_metrics``."""
    return scrape(host, config.ports.sequencer_metrics)


def _pull_rows(config: StreamConfig) -> list[ConnectionStatus]:
    """One row per subscriber: the node it pulls from (a client holds one connection)."""
    servers = {n.name: _node_samples(config, n.host) for n in config.nodes}
    rows = []
    for sub in config.subscribers:
        samples = scrape(sub.host, config.ports.pull_client_metrics)
        if samples is None:
            rows.append(
                ConnectionStatus("pull", sub.name, "-", "merged", "unreachable", None, None)
            )
            continue
        nodes = [
            n.name for n in config.nodes if _value(samples, "rt_pull_client_connected", node=n.name)
        ]
        if not nodes:
            rows.append(
                ConnectionStatus("pull", sub.name, "-", "merged", "disconnected", None, None)
            )
        for node in nodes:
            server = servers.get(node)
            lag = (
                None
                if server is None
                else _value(server, "rt_pull_server_lag_bytes", peer=sub.name)
            )
            rows.append(
                ConnectionStatus(
                    "pull",
                    sub.name,
                    node,
                    "merged",
                    "connected",
                    None,
                    None if lag is None else int(lag),
                )
            )
    return rows


def collect_status(config: StreamConfig) -> list[ConnectionStatus]:
    """The status of every replication connection the configuration describes."""
    return _push_rows(config) + _pull_rows(config)
