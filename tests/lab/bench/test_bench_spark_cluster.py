"""The cluster phase of `rt bench spark`: a real master and workers on 127.0.0.1, secured
as the stream's cluster, reading a small log; nothing left running afterwards."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from rt_appliance.errors import RTError
from rt_lab.bench.spark_bench import TOPIC, _publish
from rt_lab.bench.spark_cluster import StandaloneCluster, unit_environment

MESSAGES = 20_000
WORKERS = 2  # the bench's default is 3; two show the same and start sooner


def _running(group: int) -> list[int]:
    """The processes of process group ``group`` that have not exited (zombies aside)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[2]) == group and stat[0] != "Z":
            found.append(int(entry))
    return found


@pytest.mark.timeout(240)
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.spark
def test_the_cluster_reads_every_message_and_leaves_nothing_running(tmp_path: Path) -> None:
    directory = _publish(tmp_path / "log", TOPIC, MESSAGES)
    with StandaloneCluster(tmp_path / "cluster", WORKERS) as cluster:
        workers = cluster.alive_workers()
        reader = cluster.driver(directory, MESSAGES)
        seconds = [reader.read(), reader.read()]
        groups = cluster.groups
        state = cluster.state()
        assert all(_running(group) for group in groups)  # master, workers, driver
    assert reader.rows == MESSAGES
    assert reader.executors == WORKERS and reader.partitions >= 1
    assert all(0 < s < 60 for s in seconds)
    # every worker offers the rtlog resource as the worker unit makes it do
    assert len(workers) == WORKERS
    assert all(w["resources"]["rtlog"]["addresses"] == ["0"] for w in workers)
    assert [app["name"] for app in state["activeapps"]] == ["rt bench spark, cluster"]
    assert len(groups) == 1 + WORKERS + 1
    assert {group: _running(group) for group in groups} == {group: [] for group in groups}
    secret = (tmp_path / "cluster" / "tls" / "spark.secret").stat()
    assert secret.st_mode & 0o077 == 0


def test_the_cluster_figures_name_the_cluster_and_the_rows_it_counted(tmp_path: Path) -> None:
    from rt_lab.bench.spark_bench import SparkBenchOptions, _cluster_results

    reader = SimpleNamespace(rows=2_000_000, partitions=2, executors=3)
    found = _cluster_results(SparkBenchOptions(tmp_path), reader)  # type: ignore[arg-type]
    rate, ratio = found["cluster"], found["cluster ratio"]
    assert rate.name.startswith("batch read through a standalone cluster (3 workers of 1 core)")
    assert (
        rate.unit == "rows/s" and "2,000,000 rows counted, 2 partitions, 3 executors" in rate.note
    )
    assert ratio.unit == "%" and "against local[2]" in ratio.note


def test_the_worker_settings_come_from_the_rendered_unit() -> None:
    unit = 'Environment=SPARK_HOME=/x\nEnvironment="SPARK_WORKER_OPTS=-Da=1 -Db=2"\n'
    assert unit_environment(unit, "SPARK_WORKER_OPTS") == "-Da=1 -Db=2"
    assert unit_environment(unit, "SPARK_HOME") == "/x"
    with pytest.raises(RTError, match="SPARK_DAEMON_MEMORY"):
        unit_environment(unit, "SPARK_DAEMON_MEMORY")
