"""`rt demo` as a user runs it: the cluster demo with a leader failover, and Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rt_lab.testing.cluster import wait_until
from tests.helpers import rt

RT = [sys.executable, "-m", "rt_appliance.cli"]


def processes_mentioning(text: str) -> dict[int, str]:
    """``{pid: command line}`` of every process whose command line contains ``text``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # exited meanwhile
            continue
        args = cmdline.decode(errors="replace").split("\0")
        if any(text in a for a in args):
            found[int(entry)] = " ".join(args)
    return found


@pytest.mark.integration
def test_demo_refuses_options_that_do_not_fit() -> None:
    both = rt("demo", "--single-host", "--kill-leader", check=False)
    assert both.returncode == 2 and "belong to the cluster demo" in both.stderr
    alone = rt("demo", "--kill-leader", "--nodes", "1", check=False)
    assert alone.returncode == 2 and "at least 3 nodes" in alone.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_cluster_demo_survives_killing_the_leader(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    args = ["demo", "--duration", "20", "--kill-leader", "--no-spark", "--free-ports"]
    done = subprocess.run(
        [*RT, *args, "--workdir", str(work)], capture_output=True, text=True, timeout=280
    )
    logs = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
        for p in sorted((work / "stream" / "logs").glob("*.log"))
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{logs}"
    summary = json.loads((work / "summary.json").read_text())
    assert summary["published"] > 0 and summary["delivered"] == summary["published"]
    assert summary["missing"] == 0 and summary["duplicated"] == 0
    assert set(summary["publishers"]) == {"trades.pub-1", "quotes.pub-2"}
    assert all(p["missing"] == p["duplicated"] == 0 for p in summary["publishers"].values())
    assert summary["merged"]["missing"] == summary["merged"]["duplicated"] == 0
    assert summary["digests_identical"]
    digests = {n["sha256"] for n in summary["nodes"]} | {summary["subscriber"]["sha256"]}
    assert len(summary["nodes"]) == 3 and len(digests) == 1
    assert all(Path(n["merged_dir"]).is_dir() for n in summary["nodes"])
    assert summary["failover_s"] is not None and summary["failover_s"] > 0
    assert summary["killed"] == summary["leader_before"] is not None
    assert summary["leader_after"] is not None
    assert summary["latency_ms"]["p50"] is not None
    assert summary["ok"]
    assert "failover took" in done.stdout
    assert not processes_mentioning(str(work))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupting_the_demo_stops_every_process(tmp_path: Path, sig: signal.Signals) -> None:
    work = tmp_path / "demo"
    args = ["demo", "--duration", "600", "--free-ports", "--workdir", str(work)]
    proc = subprocess.Popen([*RT, *args], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    out = proc.stdout

    def read() -> None:
        for line in out:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("5. publishing" in x for x in lines), 90, "publishing to start")
        daemons = {
            pid: cmd for pid, cmd in processes_mentioning(str(work)).items() if pid != proc.pid
        }
        for role in ("node", "push-client", "pull-client"):
            assert any(f" {role} " in cmd for cmd in daemons.values()), role
        assert len(daemons) >= 3 + 2 + 1 + 1  # nodes, push clients, pull client, subscriber
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 130
        reader.join(timeout=10)
        assert "interrupted: stopping every process" in "".join(lines)
        assert not processes_mentioning(str(work)), "processes left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in processes_mentioning(str(work)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.spark
def test_demo_runs_the_spark_pipeline_and_counts_every_message(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    args = ["demo", "--nodes", "1", "--duration", "2", "--free-ports", "--workdir", str(work)]
    done = subprocess.run([*RT, *args], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    summary = json.loads((work / "summary.json").read_text())
    assert summary["spark"]["ran"] and summary["spark_rows"] == summary["published"] > 0
    sample = summary["spark"]["vwap_sample"]
    assert sample and {s["sym"] for s in sample} <= {"ABC", "XYZ", "KLM"}
    trades = [s for s in sample if s["topic"] == "trades"]
    assert all(98 <= s["vwap"] <= 102 and s["volume"] > 0 for s in trades)  # prices 98..102
    assert "per-minute VWAP" in done.stdout
    assert not processes_mentioning(str(work))
