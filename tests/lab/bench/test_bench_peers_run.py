"""`rt bench peers` as a user runs it, on Redis (the quickest peer to start), tiny counts.

Needs Debian's redis-server and the `peers` extra (`make bench-peers` installs both).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rt_appliance.errors import RTError
from rt_lab.bench.peers.process import require_binary

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RT = [sys.executable, "-m", "rt_appliance.cli"]


def _missing() -> str:
    try:
        require_binary("redis-server", "redis-server")
    except RTError as exc:
        return str(exc)
    for module in ("redis", "hiredis", "matplotlib"):
        if importlib.util.find_spec(module) is None:
            return f"Python module {module} missing: install the peers extra (make bench-peers)"
    return ""


def _processes_under(path: Path) -> list[str]:
    """Command lines of running processes that mention ``path``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(path) in cmdline and entry.name != str(os.getpid()):
                found.append(cmdline)
    return found


@pytest.mark.skipif(bool(_missing()), reason=_missing() or "ready")
@pytest.mark.timeout(300)
def test_redis_rows_pass_their_checks_and_land_in_the_document(tmp_path: Path) -> None:
    doc, plot, work = tmp_path / "BENCHMARKS.md", tmp_path / "cdf.png", tmp_path / "work"
    doc.write_text("# Benchmarks\n\n<!-- bench:peers:start -->\nold\n<!-- bench:peers:end -->\n")
    args = [
        *RT, "bench", "peers", "--only", "redis", "--runs", "1",
        "--messages", "5000", "--latency-rate", "2000", "--latency-seconds", "1",
        "--workdir", str(work), "--output", str(doc), "--plot", str(plot), "--json",
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-5000:]
    rows = {r["row"]: r for r in json.loads(done.stdout)["rows"]}
    assert set(rows) == {"redis-always", "redis-everysec"}
    for row in rows.values():
        assert row["runs_ok"] == 1, row["runs"]
        assert row["version"].startswith("Redis ")
        median = row["median"]
        assert 100 < median["throughput_msg_s"] < 10_000_000
        assert 0 < median["p50_ms"] <= median["p99_ms"] <= median["max_ms"] < 30_000
        # redis-server and the two applications did work during the latency phase
        assert 0 < median["cpu_servers_percent"] < 200
        assert 0 < median["cpu_apps_percent"] < 200
        assert row["latency_samples"] == 2000

    text = doc.read_text()
    assert text.count("<!-- bench:peers:start -->") == 1 and "\nold\n" not in text
    assert "| Redis Streams, AOF appendfsync everysec (Redis " in text
    assert "![Latency CDF at 2,000 msg/s](cdf.png)" in text
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert list(work.iterdir()) == []  # every run passed: nothing kept
    assert _processes_under(work) == []  # the servers were stopped and reaped
