"""``rt spark-pipeline``: every message in the Parquet output exactly once, across appends,
restarts, a kill -9 in the middle of a micro-batch, new sessions and pruned files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rt_appliance import Position, Publisher, Subscriber
from rt_appliance.log.segments import list_files
from rt_appliance.sequencer.holds import read_holds
from rt_lab.testing.cluster import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PER_APPEND = 15_000
RT = (sys.executable, "-m", "rt_appliance.cli")


def config(tmp_path: Path) -> Path:
    node = tmp_path / "node"
    node.mkdir()
    (node / "merged").symlink_to(tmp_path / "pub" / "trades.pub-1", target_is_directory=True)
    path = tmp_path / "rt.yaml"
    path.write_text(
        "stream: t\n"
        "nodes:\n"
        f"  - {{name: rt-1, host: 127.0.0.1, data_dir: {node}}}\n"
        "spark:\n"
        "  enabled: true\n"
        "  master: local[2]\n"
        "  codec: json\n"
        "  schema: sym STRING, price DOUBLE, size BIGINT\n"
        "  max_bytes_per_trigger: 1MiB\n"
        "  trigger_interval_ms: 200\n"
        "  memory: 512MiB\n"
    )
    return path


def append(tmp_path: Path, first: int, count: int) -> None:
    """A new publisher session: ids first.., small files so that they roll."""
    with Publisher(tmp_path / "pub", "trades", "pub-1", roll_bytes=256 << 10) as pub:
        for start in range(first, first + count, 1000):
            ids = list(range(start, start + 1000))
            docs = [{"sym": f"S{i % 7}", "price": i / 8, "size": i % 100 + 1} for i in ids]
            pub.publish_batch([json.dumps(d).encode() for d in docs], ids=ids)


def pipeline(config_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RT, "spark-pipeline", "--config", str(config_path), "--node", "rt-1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # kill -9 reaches Spark's JVM too
    )


def run_once(config_path: Path) -> None:
    proc = pipeline(config_path, "--once")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]


def batch_in_flight(checkpoint: Path) -> bool:
    """A micro-batch was logged in offsets/ and not yet in commits/."""

    def numbered(d: Path) -> set[str]:
        return {p.name for p in d.glob("[0-9]*")} if d.is_dir() else set()

    return bool(numbered(checkpoint / "offsets") - numbered(checkpoint / "commits"))


def test_exactly_once_across_restarts_and_kill_9(spark: Any, tmp_path: Path) -> None:
    path = config(tmp_path)
    node, log = tmp_path / "node", tmp_path / "pub" / "trades.pub-1"
    append(tmp_path, 1, PER_APPEND)
    run_once(path)
    hold = read_holds(node)[0]
    assert hold.name == "spark-pipeline" and hold.position == Subscriber(log).end_position()
    # the archiver may prune what the pipeline committed: every file before the hold
    for f in list_files(log)[:-1]:
        if Position.of(f.session, f.roll, 0) < Position(hold.position).with_offset(0):
            f.path.unlink()

    append(tmp_path, PER_APPEND + 1, PER_APPEND)
    running = pipeline(path)
    try:
        wait_until(
            lambda: (
                len(list((node / "spark/checkpoint/commits").glob("[0-9]*"))) >= 2
                and batch_in_flight(node / "spark/checkpoint")
            ),
            180,
            "a micro-batch in flight",
            interval_s=0.01,
        )
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.communicate()

    append(tmp_path, 2 * PER_APPEND + 1, PER_APPEND)
    run_once(path)
    out = spark.read.parquet(str(node / "spark/output"))
    ids = [r.id for r in out.select("id").collect()]
    assert len(ids) == 3 * PER_APPEND
    assert sorted(ids) == list(range(1, 3 * PER_APPEND + 1))  # each once: none lost or twice
    assert out.select("position").distinct().count() == 3 * PER_APPEND
    assert {r.topic for r in out.select("topic").distinct().collect()} == {"trades"}
    assert out.where("sym IS NULL OR price IS NULL").count() == 0
    assert read_holds(node)[0].position == Subscriber(log).end_position()
