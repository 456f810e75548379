"""``rt spark-pipeline`` with ``spark.failover``: of the pipelines of two nodes sharing
a checkpoint and an output, only the lease holder's works; when it dies and the lease
goes to the other, that one continues from the shared checkpoint, exactly once.

The lease files are written here as a node writes them once raft committed a grant
(tests/sequencer/test_leases.py and the container test cover the grants themselves)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rt_appliance import Subscriber
from rt_appliance.sequencer.holds import read_holds
from rt_appliance.sequencer.leases import read_wants, write_lease
from rt_appliance.spark.pipeline import checkpoint_position
from rt_lab.testing.cluster import wait_until
from tests.spark.test_pipeline import PER_APPEND, RT, append

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

LEASE = "spark-pipeline"


def config(tmp_path: Path) -> Path:
    lines = ["stream: t", "nodes:"]
    for i in (1, 2, 3):  # rt-3 runs no pipeline here
        node = tmp_path / f"node-{i}"
        node.mkdir()
        (node / "merged").symlink_to(tmp_path / "pub" / "trades.pub-1", target_is_directory=True)
        lines.append(f"  - {{name: rt-{i}, host: 127.0.0.{i}, data_dir: {node}}}")
    lines += [
        "spark:",
        "  enabled: true",
        "  master: local[1]",
        "  codec: json",
        "  schema: sym STRING, price DOUBLE, size BIGINT",
        "  max_bytes_per_trigger: 1MiB",
        "  trigger_interval_ms: 200",
        "  memory: 512MiB",
        "  failover: true",
        "  lease_ms: 8000",
        f"  output_dir: {tmp_path / 'shared/output'}",
        f"  checkpoint_dir: {tmp_path / 'shared/checkpoint'}",
    ]
    path = tmp_path / "rt.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def grant(tmp_path: Path, holder: str, for_s: float) -> None:
    """The lease as both nodes write it after raft committed a grant to ``holder``."""
    until = time.time_ns() + int(for_s * 1e9)
    for i in (1, 2):
        write_lease(tmp_path / f"node-{i}", LEASE, {"holder": holder, "until": until})


def commits(tmp_path: Path) -> int:
    return len(list((tmp_path / "shared/checkpoint/commits").glob("[0-9]*")))


def test_only_the_holder_works_and_the_next_continues_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    path = config(tmp_path)
    log = tmp_path / "pub" / "trades.pub-1"
    append(tmp_path, 1, PER_APPEND)
    grant(tmp_path, "rt-1", 600)
    first = _pipeline(path, "rt-1")
    second = _pipeline(path, "rt-2")
    try:
        wait_until(
            lambda: _alive(first, second) and read_wants(tmp_path / "node-2") == [LEASE],
            120,
            "rt-2's pipeline to want",
        )
        wait_until(lambda: commits(tmp_path) >= 2, 180, "rt-1's pipeline to commit batches")
        append(tmp_path, PER_APPEND + 1, PER_APPEND)
        # rt-2 stands by: it holds its node's log from the shared checkpoint
        wait_until(
            lambda: (
                bool(read_holds(tmp_path / "node-2"))
                and read_holds(tmp_path / "node-2")[0].position
                == checkpoint_position(tmp_path / "shared/checkpoint")
            ),
            60,
            "rt-2's hold to follow the checkpoint",
        )
        os.killpg(first.pid, signal.SIGKILL)  # rt-1's node dies, mid-stream
        first.communicate()
        before = commits(tmp_path)
        append(tmp_path, 2 * PER_APPEND + 1, PER_APPEND)
        grant(tmp_path, "rt-2", 600)  # its lease expired; raft granted it to rt-2
        wait_until(
            lambda: (
                checkpoint_position(tmp_path / "shared/checkpoint")
                == Subscriber(log).end_position()
            ),
            180,
            "rt-2's pipeline to catch up",
        )
        assert commits(tmp_path) > before
        # its lease is running out: it stops before it expires
        grant(tmp_path, "rt-2", 2.5)  # inside the quarter-term margin (2 s) in 0.5 s
        wait_until(lambda: "no longer holds" in _log(tmp_path, "rt-2"), 60, "rt-2 to stop")
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    out = spark.read.parquet(str(tmp_path / "shared/output"))
    ids = [r.id for r in out.select("id").collect()]
    assert sorted(ids) == list(range(1, 3 * PER_APPEND + 1))  # each once: none lost or twice
    assert "standing by" in _log(tmp_path, "rt-2")
    assert "holds the spark-pipeline lease" in _log(tmp_path, "rt-1")


def _pipeline(path: Path, node: str) -> subprocess.Popen[str]:
    """``rt spark-pipeline`` of ``node``, its output in ``pipeline-<node>.log``."""
    with open(path.parent / f"pipeline-{node}.log", "w") as log:
        return subprocess.Popen(
            [*RT, "--log-level", "info", "spark-pipeline", "--config", str(path), "--node", node],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # kill -9 reaches Spark's JVM too
        )


def _alive(*procs: subprocess.Popen[str]) -> bool:
    """True while every pipeline runs; fails at once with the log of one that exited."""
    for proc in procs:
        if proc.poll() is not None:
            args = [str(a) for a in proc.args]  # type: ignore[union-attr]
            node = args[args.index("--node") + 1]
            log = Path(args[args.index("--config") + 1]).parent / f"pipeline-{node}.log"
            raise AssertionError(
                f"{node}'s pipeline exited {proc.returncode}: {log.read_text()[-3000:]}"
            )
    return True


def _log(tmp_path: Path, node: str) -> str:
    return (tmp_path / f"pipeline-{node}.log").read_text()


def test_once_is_refused_with_failover(tmp_path: Path) -> None:
    """A run with --once would write the shared checkpoint without holding the lease."""
    done = subprocess.run(
        [*RT, "spark-pipeline", "--config", str(config(tmp_path)), "--node", "rt-1", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "--once writes the shared checkpoint without the lease" in done.stderr
    assert not (tmp_path / "shared").exists()  # nothing started, nothing written
