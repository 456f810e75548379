"""The report of a chaos run: a JSON document, a Markdown page and a timeline plot."""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rt_lab.chaos.checker import SAFETY
from rt_lab.chaos.runner import ChaosResult

__all__ = ["as_dict", "plot_timeline", "summary", "write_report"]


def as_dict(result: ChaosResult) -> dict[str, Any]:
    o, v = result.options, result.verdict
    return {
        "seed": o.seed,
        "nodes": o.nodes,
        "seconds": o.seconds,
        "rate_per_publisher": o.rate,
        "faults": list(o.faults),
        "unavailable": result.unavailable,
        "safe": result.safe,
        "violations": {k: asdict(v[k]) for k in SAFETY},
        "messages": {
            "checked": v.checked,
            "attempted": v.attempted,
            "acknowledged": v.acked,
            "unacknowledged_delivered": v.unacked_delivered,
            "unacknowledged_lost": v.unacked_lost,
        },
        "settled_s": result.settled_s,
        "stuck": result.stuck,
        "exited_on_their_own": result.exits,
        "elapsed_s": result.elapsed_s,
        "stalls_by_kind": stalls_by_kind(result),
        "availability": _availability_doc(result),
        "samples": [asdict(s) for s in result.samples],
        "injected": [
            {
                **asdict(r.fault),
                "started": r.started,
                "ended": r.ended,
                "did": r.did,
                "error": r.error,
                "recovery_s": r.recovery_s,
                "stall_s": r.stall_s,
            }
            for r in result.injected
        ],
    }


def _recoveries(result: ChaosResult) -> str:
    times = sorted(r.recovery_s for r in result.injected if r.recovery_s is not None)
    never = sum(r.recovery_s is None for r in result.injected)
    if not times:
        return "no recovery measured" + (f" ({never} never recovered)" if never else "")
    median = times[len(times) // 2]
    return f"recovery median {median:.1f}s, max {times[-1]:.1f}s" + (
        f", {never} without a measured recovery" if never else ""
    )


def stalls_by_kind(result: ChaosResult) -> dict[str, dict[str, float | int]]:
    """Per fault kind: how long merging stood still around its faults (median, max, and
    how many never saw merging advance again before the run ended)."""
    out: dict[str, dict[str, float | int]] = {}
    for kind in sorted({r.fault.kind for r in result.injected}):
        of_kind = [r for r in result.injected if r.fault.kind == kind]
        times = sorted(r.stall_s for r in of_kind if r.stall_s is not None)
        figures: dict[str, float | int] = {"faults": len(of_kind)}
        if times:
            figures |= {"median_s": times[len(times) // 2], "max_s": times[-1]}
        figures["never_advanced"] = len(of_kind) - len(times)
        out[kind] = figures
    return out


def _availability_doc(result: ChaosResult) -> dict[str, object] | None:
    a = result.availability
    if a is None:
        return None
    return {
        "max_stall_s": a.max_stall_s,
        "judged": a.judged,
        "worst_s": a.worst_s,
        "ok": a.ok,
        "violations": a.violations,
        "power_loss_restart_s": a.restart_s,
    }


def _availability(result: ChaosResult) -> list[str]:
    a = result.availability
    if a is None:
        return []
    worst = "-" if a.worst_s is None else f"{a.worst_s:.1f}s"
    lines = [
        f"availability: {'PASS' if a.ok else 'FAIL'}: {a.judged} one-node faults judged, "
        f"merging stood still at most {worst} (bound {a.max_stall_s:.1f}s)"
    ]
    if a.restart_s:
        times = sorted(a.restart_s)
        lines.append(
            f"after a power loss of every node: merging again {times[len(times) // 2]:.1f}s "
            f"(median), {times[-1]:.1f}s at most, after the nodes were started "
            f"({len(times)} power losses on a recovered stream, none disturbed by the next)"
        )
    return lines + [f"  stalled: {v}" for v in a.violations]


def _stalls(result: ChaosResult) -> str:
    parts = [
        f"{kind} {f['median_s']:.1f}/{f['max_s']:.1f}" if "median_s" in f else f"{kind} -"
        for kind, f in stalls_by_kind(result).items()
    ]
    return "merging stood still, median/max s by fault: " + (", ".join(parts) or "no faults")


def summary(result: ChaosResult) -> str:
    """What ``rt chaos`` prints at the end."""
    v = result.verdict
    counts = ", ".join(f"{k} {v[k].count}" for k in SAFETY)
    lines = [
        f"{'PASS' if result.safe and result.available else 'FAIL'}: seed {result.options.seed}, "
        f"{len(result.injected)} faults in {result.options.seconds:.0f}s on "
        f"{result.options.nodes} nodes",
        f"messages: {v.checked} checked, {v.acked} acknowledged of {v.attempted} published; "
        f"not acknowledged: {v.unacked_delivered} delivered, {v.unacked_lost} lost (allowed)",
        f"violations: {counts}",
        _recoveries(result),
        _stalls(result),
        *_availability(result),
        f"daemons that exited on their own: {len(result.exits) or 'none'}",
    ]
    lines += [f"  {e}" for e in result.exits]
    for k in SAFETY:
        lines += [f"  {k}: {e}" for e in v[k].examples]
    return "\n".join(lines)


def _markdown(result: ChaosResult) -> str:
    doc = as_dict(result)
    out = [
        f"# Chaos run, seed {doc['seed']}",
        "",
        "```",
        summary(result),
        "```",
        "",
        f"Faults asked: {', '.join(doc['faults']) or 'none'}.",
    ]
    for fault, why in doc["unavailable"].items():
        out.append(f"Not available here: {fault} ({why}).")
    out += [
        "",
        "| start (s) | fault | what was done | lasted (s) | recovery (s) | stood still (s) |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in doc["injected"]:
        recovery = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.1f}"
        stall = "-" if r["stall_s"] is None else f"{r['stall_s']:.1f}"
        did = r["did"] + (f" (failed: {r['error']})" if r["error"] else "")
        kind = f"{r['kind']} {r['variant']}".strip()
        lasted = r["ended"] - r["started"]
        out.append(f"| {r['started']:.1f} | {kind} | {did} | {lasted:.1f} | {recovery} | {stall} |")
    out += ["", "![timeline](timeline.png)", ""]
    return "\n".join(out)


def plot_timeline(result: ChaosResult, path: Path) -> None:
    """Faults (shaded spans) against merged throughput and each node's commit index."""
    # a user without a writable home (a service account) gets its cache beside the plot
    os.environ.setdefault("MPLCONFIGDIR", str(path.parent / ".matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result.samples
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(12, 6))
    t = [s.t for s in samples]
    rate = [0.0] + [
        max(0.0, (b.merged_bytes - a.merged_bytes) / max(1e-3, b.t - a.t)) / 1024
        for a, b in itertools.pairwise(samples)
    ]
    top.plot(t, rate, color="black", linewidth=0.8)
    top.set_ylabel("merged KiB/s")
    nodes = sorted({n for s in samples for n in s.commit_index})
    for n in nodes:
        xs = [s.t for s in samples if n in s.commit_index]
        bottom.plot(xs, [s.commit_index[n] for s in samples if n in s.commit_index], label=n)
    bottom.set_ylabel("raft commit index")
    bottom.set_xlabel("seconds")
    if nodes:
        bottom.legend(loc="upper left", fontsize="small")
    colours = {
        "kill": "tab:red",
        "pause": "tab:orange",
        "partition": "tab:blue",
        "clock": "tab:purple",
        "corrupt": "tab:brown",
        "disk-full": "tab:olive",
        "power-loss": "black",
    }
    for r in result.injected:
        colour = colours.get(r.fault.kind, "grey")
        for ax in (top, bottom):
            ax.axvspan(r.started, max(r.ended, r.started + 0.3), color=colour, alpha=0.2, lw=0)
        top.annotate(
            r.fault.kind,
            (r.started, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=6,
            rotation=90,
            va="top",
        )
    verdict = "PASS" if result.safe else "FAIL"
    fig.suptitle(f"rt chaos seed {result.options.seed}: {verdict}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: ChaosResult, directory: Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``timeline.png`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": directory / "report.json",
        "markdown": directory / "report.md",
        "timeline": directory / "timeline.png",
    }
    paths["json"].write_text(json.dumps(as_dict(result), indent=1) + "\n")
    paths["markdown"].write_text(_markdown(result))
    plot_timeline(result, paths["timeline"])
    return paths
