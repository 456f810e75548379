"""One Spark pipeline for the stream, failing over between three nodes, each a
container booting systemd.

Every node runs `rt-spark-pipeline.service` with `spark.failover`: the Parquet output
and Spark's checkpoint live in one directory of this machine mounted into all three
containers (standing in for NFS, as docs/SPARK.md says). Only the pipeline whose node
holds the `spark-pipeline` lease, granted through raft, works; `rt status` names it.
While a publisher publishes, the holder's container is killed outright: once its lease
expires another node's pipeline takes it and continues from the shared checkpoint. The
Parquet output then holds every message published exactly once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.config import StreamConfig
from rt_appliance.config.spark import DEFAULT_JAVA_HOME
from rt_appliance.nodestatus import NodeStatus
from rt_appliance.spark.pipeline import LEASE_NAME, checkpoint_position
from rt_appliance.subscribe import Subscriber
from rt_lab.testing.nspawn import Container
from tests.appliance.test_cluster_containers import (
    NODES,
    Cluster,
    _hosts,
    _identical,
    _publishing,
    _statuses,
    wait_for,
)
from tests.appliance.test_container import spark_package
from tests.appliance.test_spark_container import JAVA_CONF, _missing

pytestmark = [
    pytest.mark.container,
    pytest.mark.spark_cluster,
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]

SHARED = "/srv/rt-shared"  # where every node mounts the shared directory


@pytest.fixture()
def shared_cluster(tmp_path: Path) -> Iterator[Cluster]:
    spark_package()
    shared = tmp_path / "shared"
    shared.mkdir()
    for made in _hosts(tmp_path, len(NODES)):
        made.spark_deb = spark_package()
        made.binds |= {Path(DEFAULT_JAVA_HOME): DEFAULT_JAVA_HOME, JAVA_CONF: str(JAVA_CONF)}
        made.shared[shared] = SHARED
        yield made


def _holder(config: StreamConfig) -> str | None:
    """The lease's holder as the nodes that answer agree it; None if they do not."""
    said = set()
    for answer in _statuses(config).values():
        if isinstance(answer, NodeStatus):
            lease = answer.leases.get(LEASE_NAME) or {}
            said.add(lease.get("holder") if (lease.get("remaining_s") or 0) > 0 else None)
    return said.pop() if len(said) == 1 else None


def _commits(shared: Path) -> list[int]:
    found = (shared / "checkpoint" / "commits").glob("[0-9]*")
    return sorted(int(p.name) for p in found)


@pytest.mark.timeout(1500)
def test_one_pipeline_fails_over_when_its_node_dies_and_writes_every_message_once(
    shared_cluster: Cluster,
) -> None:
    cluster = shared_cluster
    shared = cluster.work / "shared"
    cluster.spark = {
        "enabled": True,
        "master": "local[1]",
        "memory": "512MiB",
        "trigger_interval_ms": 500,
        "failover": True,
        "output_dir": f"{SHARED}/output",
        "checkpoint_dir": f"{SHARED}/checkpoint",
    }
    config = cluster.start_stream()
    for name in NODES:  # all at once: each JVM takes a while to start
        cluster.containers[name].run("systemctl", "start", "--no-block", "rt-spark-pipeline")
    wait_for(
        lambda: all(
            cluster.containers[n].unit_property("rt-spark-pipeline", "ActiveState") == "active"
            for n in NODES
        ),
        "every node's pipeline started",
        400,
    )

    with _publishing(config) as (publisher, arrivals):
        wait_for(lambda: _holder(config) is not None, "a node to hold the lease", 120)
        holder = _holder(config)
        assert holder is not None
        shown = _rt_status(cluster)
        assert f"lease {LEASE_NAME}: {holder}," in shown, shown
        wait_for(lambda: len(_commits(shared)) >= 3, "the holder's pipeline committing", 300)
        for name in NODES:  # the others stand by
            status = cluster.containers[name].unit_property("rt-spark-pipeline", "StatusText")
            assert ("standing by" in status) == (name != holder), (name, status)

        before = _commits(shared)[-1]
        killed = time.monotonic()
        cluster.containers[holder].kill()  # the machine dies, its pipeline with it
        rest = [n for n in NODES if n != holder]
        wait_for(lambda: _commits(shared)[-1] > before, "a commit by another node", 240)
        failover_s = time.monotonic() - killed
        taken = _holder(config)
        assert taken in rest, taken
        wait_for(lambda: len(arrivals.payloads) > len(publisher.sent) // 2, "still delivering")
        shown = _rt_status(cluster)
        assert f"lease {LEASE_NAME}: {taken}," in shown, shown
    sent = publisher.sent
    _identical(cluster, rest)
    merged_end = Subscriber(cluster.containers[rest[0]].root / "var/lib/rt/merged").end_position()
    wait_for(
        lambda: checkpoint_position(shared / "checkpoint") == merged_end,
        "the pipeline to commit all that was merged",
        240,
    )
    print(
        f"spark pipeline failover: {holder} killed, {taken}'s pipeline committed its first "
        f"batch {failover_s:.1f}s later; {len(sent)} messages"
    )
    out = _read_output(cluster.containers[taken], shared)
    assert sorted(out) == sorted(sent)  # every message published, exactly once
    assert len(set(out)) == len(out)


def _rt_status(cluster: Cluster) -> str:
    """`rt status` as an operator runs it (exit status 1 while a node is down)."""
    done = subprocess.run(
        [sys.executable, "-m", "rt_appliance.cli", "status", "--config", str(cluster.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout + done.stderr


READ = f"""
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
rows = spark.read.parquet("{SHARED}/output").select("payload").collect()
with open("{SHARED}/read.txt", "w") as out:
    out.write("\\n".join(bytes(r.payload).decode() for r in rows))
spark.stop()
"""


def _read_output(node: Container, shared: Path) -> list[bytes]:
    """The payloads of the Parquet output, read with Spark on a node: the sink's
    _spark_metadata log names the committed files by the path the nodes mount."""
    (node.root / "tmp/read.py").write_text(READ)
    done = node.run(
        "env", f"JAVA_HOME={DEFAULT_JAVA_HOME}", "/opt/rt-appliance/bin/python", "/tmp/read.py",
        check=False, timeout_s=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [line.encode() for line in (shared / "read.txt").read_text().splitlines()]
