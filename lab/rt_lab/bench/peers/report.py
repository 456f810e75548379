"""The report of ``rt bench peers``: one table, its notes, and a latency CDF (PNG)."""

from __future__ import annotations

import os
from pathlib import Path

from rt_lab.bench.peers.runner import PeersOptions, PeersReport, RowResult
from rt_lab.bench.peers.workload import TICK_NS

__all__ = ["notes", "plot_cdf", "table"]

PLOT_POINTS = 2000  # points per curve: the CDF at evenly spaced fractions


def table(rows: list[RowResult]) -> str:
    """Our stream next to each peer, with each row's durability."""
    lines = [
        "| system | durability | throughput msg/s | p50 ms | p99 ms | max ms "
        "| servers' CPU % | applications' CPU % | runs ok |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        name = f"{r.row.label} ({r.version})" if r.version else r.row.label
        if r.skipped:
            lines.append(f"| {name} | {r.row.durability} | - | - | - | - | - | - | skipped |")
            continue
        figures = [
            _fmt(r.median("throughput"), 0),
            _fmt(r.median("p50_ms"), 2),
            _fmt(r.median("p99_ms"), 2),
            _fmt(r.median("max_ms"), 1),
            _fmt(_percent(r.median("cpu_servers")), 0),
            _fmt(_percent(r.median("cpu_apps")), 0),
        ]
        lines.append(
            f"| {name} | {r.row.durability} | {' | '.join(figures)} | "
            f"{len(r.passed)}/{len(r.runs)} |"
        )
    return "\n".join(lines)


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def _fmt(value: float | None, decimals: int) -> str:
    return "failed" if value is None else f"{value:,.{decimals}f}"


def notes(report: PeersReport, opts: PeersOptions, plot: Path | None, doc: Path | None) -> str:
    """How the table was measured, what failed or was skipped, and the CDF."""
    rate, seconds = opts.latency_rate, opts.latency_seconds
    text = [
        f"Every system gets the same work, with 100-byte messages: **throughput** is "
        f"{opts.messages:,} messages published as fast as its Python client allows, over "
        f"the time from the first publish until the subscriber holds all of them; "
        f"**latency** is {rate:,} msg/s for {seconds:g} s, publish to subscriber, per message "
        f"(p50, p99, max). Figures are medians of the runs that passed (runs ok); a run "
        f"passes only if its subscriber received every message exactly once and in order.",
        "",
        f"- Peers: one publisher (this process) and one subscriber (a process of its own) "
        f"per phase, on a stream created afresh, read from its beginning. The publisher "
        f"stamps each message with `time.monotonic_ns()` (one clock for the whole machine); "
        f"in the latency phase it sends what is due every {TICK_NS / 1e6:g} ms. Clients: "
        f"nats-py `publish_async` and an ordered push consumer (publisher on node 1, "
        f"subscriber on node 3); rstream `send_batch` (1,000 a call) and a consumer from the "
        f"first offset; redis-py with hiredis, pipelines of 1,000 `XADD` and `XREAD BLOCK`. "
        f"The servers run on 127.0.0.1 with their data under the work directory, started "
        f"and stopped by the bench (no system service).",
        f"- rt-appliance: each run is `rt bench cluster --runs 1 --measure throughput "
        f"--measure latency --messages {max(1000, opts.messages // 2):,}` (two publishers, "
        f"so {max(2000, opts.messages // 2 * 2):,} in all, in batches of 1,000) with "
        f"`--latency-rate {rate}` (what is due published every 1 ms, like the peers) on a "
        f"fresh 3-node stream with mutual TLS; the subscriber reads sub-1's copy of the "
        f"merged log. That bench checks the count the subscriber read, not each message's "
        f"sequence.",
        "- CPU, as a share of one core during the latency phase: **servers'** is every "
        "server process of the system with the helpers it started (the 3 nats-servers; "
        "RabbitMQ's Erlang VM and its helpers; redis-server; for rt-appliance the 3 `rt "
        "node` processes), **applications'** the publisher and the subscriber with their "
        "clients (for rt-appliance the two publishing applications and the subscribing one, "
        "which replicate and pull themselves).",
        "- Everything shares this machine's cores: the servers, the publisher and the "
        "subscriber (for rt-appliance, its 3 node processes and the 3 applications), so "
        "figures are CPU-bound and noisy.",
    ]
    if plot is not None:
        where = os.path.relpath(plot, doc.parent) if doc is not None else str(plot)
        text += ["", f"![Latency CDF at {rate:,} msg/s]({where})", ""]
        text.append(_plot_caption(report))
    problems = _problems(report)
    if problems:
        text += ["", "Failed runs and skipped rows:", "", *problems]
    return "\n".join(text) + "\n"


def _plot_caption(report: PeersReport) -> str:
    missing = [r.row.label for r in report.rows if r.passed and not r.samples_ns]
    caption = "The CDF holds every message of the latency runs that passed."
    if missing:
        caption += (
            " Not plotted: " + "; ".join(missing) + ": `rt bench cluster --json` reports its "
            "latency percentiles, not each message's latency."
        )
    return caption


def _problems(report: PeersReport) -> list[str]:
    lines = []
    for r in report.rows:
        if r.skipped:
            lines.append(f"- {r.row.label}: skipped: {r.skipped}")
        for i, run in enumerate(r.runs, 1):
            if not run.ok:
                lines.append(f"- {r.row.label}, run {i}: {run.reason}")
    if report.kept is not None:
        lines.append(f"- logs and data kept in {report.kept}")
    return lines


def plot_cdf(rows: list[RowResult], path: Path, rate: int) -> bool:
    """The latency CDF of every row with per-message samples; False if there were none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    curves = [(r, np.sort(np.asarray(r.samples_ns, dtype=np.int64))) for r in rows if r.samples_ns]
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    fractions = np.linspace(0.0, 1.0, PLOT_POINTS)
    for r, ordered in curves:
        at = np.quantile(ordered, fractions) / 1e6
        name = f"{r.row.label} ({r.version})" if r.version else r.row.label
        ax.step(at, fractions, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("publish to subscriber, ms (log scale)")
    ax.set_ylabel("fraction of messages")
    ax.set_title(f"Latency at {rate:,} msg/s, 100-byte messages")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
