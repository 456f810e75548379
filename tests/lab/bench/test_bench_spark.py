"""`rt bench spark` as a user runs it, with tiny sizes: every figure present and sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.spark]

RT = [sys.executable, "-m", "rt_appliance.cli"]


@pytest.mark.timeout(300)
def test_a_tiny_spark_bench_reports_every_figure(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n")
    args = [
        *RT,
        "bench",
        "spark",
        "--runs=1",
        "--rows=20000",
        "--lag-seconds=2",
        "--rate=2000",
        "--memory-rows=100000",
        "--memory-rate=50000",
        "--memory-bound-mb=100000",
        "--cluster-workers=0",  # the cluster phase: test_bench_spark_cluster.py
        f"--workdir={tmp_path / 'work'}",
        f"--output={doc}",
        "--json",
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-5000:]
    results = {r["name"]: r for r in json.loads(done.stdout)}

    def median(prefix: str) -> float:
        found = [r for name, r in results.items() if name.startswith(prefix)]
        assert found, f"no figure {prefix!r} in {sorted(results)}"
        assert len(found[0]["runs"]) == 1
        return float(found[0]["median"])

    rt_rate = median("batch read, spark.read.format('rt')")
    parquet_rate = median("batch read, the same rows from Parquet")
    assert 1_000 < rt_rate < 100_000_000 and 1_000 < parquet_rate < 100_000_000
    assert median("rt read rate / Parquet read rate") == pytest.approx(
        100 * rt_rate / parquet_rate, rel=1e-6
    )
    assert median("batch read, Python source yielding") > 1_000
    assert median("slice reader alone") > 10_000
    assert not [name for name in results if "cluster" in name]
    assert 0 <= median("planning on the driver") < 60
    assert 0 < median("one-record rt query") < 60

    p50, p99 = median("streaming lag p50"), median("streaming lag p99")
    assert 0 < p50 <= p99 < 60_000  # committed after publishing, within a minute
    sink = next(r for name, r in results.items() if name.startswith("streaming rows in the"))
    assert sink["median"] == 1000 + 2 * 2000  # the warm-up thousand and the timed ones
    assert "none lost or duplicated" in sink["note"]

    assert median("streaming rate while memory") > 1_000
    growth = [
        r for name, r in results.items() if "RSS growth over the second half of 100,000" in name
    ]
    assert [r["name"].split(" RSS")[0] for r in growth] == ["driver JVM", "Python workers (summed)"]
    assert all("start" in r["note"] and "end" in r["note"] for r in growth)

    text = doc.read_text()
    assert "<!-- bench:spark:start -->" in text and "<!-- bench:spark:end -->" in text
    assert "## `rt bench spark`" in text and "load average" in text
    assert "batch read, spark.read.format('rt') -> noop: " in text  # the verdicts
