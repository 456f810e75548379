"""The Spark pipeline under a real systemd: both packages, `rt apply`, its sandboxed unit,
messages published into the node coming out as Parquet rows.

One container (systemd-nspawn --boot) is the only node of a stream with spark enabled,
and also its publisher host (a push client started with systemd-run, `rt publish`).
The container has no network to install Java from, so this machine's Java 17 is bound
into it where Debian's openjdk-17-jre-headless puts it, and rt-appliance-spark is
installed without checking that dependency.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rt_appliance.config.spark import DEFAULT_JAVA_HOME
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.nspawn import Container, nspawn_missing
from tests.appliance.test_container import DIST, package, spark_package

JAVA_CONF = Path("/etc/java-17-openjdk")  # the JRE's configuration files link here


def _missing() -> str | None:
    if not (Path(DEFAULT_JAVA_HOME) / "bin/java").exists() or not JAVA_CONF.is_dir():
        return f"Java 17 is not installed here ({DEFAULT_JAVA_HOME}; openjdk-17-jre-headless)"
    return nspawn_missing()


pytestmark = [
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]

ROWS = 200
STREAM = {
    "stream": "sparkbox",
    "nodes": [{"name": "rt-1", "host": "127.0.0.1"}],
    "publishers": [
        {"name": "pub-1", "host": "127.0.0.2", "topics": ["trades"], "data_dir": "/srv/pub"}
    ],
    "spark": {
        "enabled": True,
        "master": "local[2]",
        "transform": None,
        "codec": "json",
        "schema": "sym STRING, price DOUBLE, size BIGINT",
        "trigger_interval_ms": 500,
        "memory": "512MiB",
    },
}
PIPELINE = "rt-spark-pipeline.service"
COUNT_ROWS = (
    "import pyarrow.dataset as ds; "
    "print(ds.dataset('/var/lib/rt/spark/output', format='parquet',"
    " partitioning='hive').count_rows())"
)

READ_MERGED = (
    "from pyspark.sql import SparkSession; "
    "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
    ".getOrCreate(); "
    "print(spark.read.format('rt').load('/var/lib/rt/merged').count())"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    package(1)
    spark_package()
    logs = tmp_path_factory.mktemp("container")
    binds = {
        DIST: "/mnt/dist",
        Path(DEFAULT_JAVA_HOME): DEFAULT_JAVA_HOME,
        JAVA_CONF: str(JAVA_CONF),
    }
    with Container("rt-spark-1", logs, binds=binds) as container:
        yield container


def journal(node: Container, unit: str) -> str:
    return node.run("journalctl", "-u", unit, "--no-pager", "-n", "80", check=False).stdout


@pytest.mark.timeout(900)
def test_pipeline_unit_turns_published_messages_into_parquet(node: Container) -> None:
    node.run("dpkg", "-i", "/mnt/dist/rt-appliance_0.1.0-1_amd64.deb")
    node.run("dpkg", "-i", "--force-depends", "/mnt/dist/rt-appliance-spark_0.1.0-1_amd64.deb")
    node.run("/opt/rt-appliance/bin/python", "-c", "import pyspark, pyarrow")

    (node.root / "etc/rt/rt.yaml").write_text(yaml.safe_dump(STREAM, sort_keys=False))
    node.run("rt", "certs", "init", "--config", "/etc/rt/rt.yaml", "--out", "/root/tls")
    for name in ("ca.crt", "rt-1.crt", "pub-1.crt", "rt-1.key", "pub-1.key"):
        mode = "0640" if name.endswith(".key") else "0644"
        node.run("install", "-m", mode, "-g", "rt", f"/root/tls/{name}", "/etc/rt/tls/")
    node.run("install", "-d", "-o", "rt", "-g", "rt", "-m", "0770", "/srv/pub")

    applied = node.run("rt", "apply", "--host", "rt-1")
    assert f"created /etc/systemd/system/{PIPELINE}" in applied.stdout
    node.run("systemd-analyze", "verify", "--man=no", f"/etc/systemd/system/{PIPELINE}")

    node.run("systemctl", "start", "rt-sequencer", timeout_s=200)
    # Type=notify: start returns once the streaming query runs (a JVM, under the sandbox).
    started = node.run("systemctl", "start", PIPELINE, check=False, timeout_s=240)
    assert started.returncode == 0, journal(node, PIPELINE)
    assert node.unit_property(PIPELINE, "ActiveState") == "active", journal(node, PIPELINE)
    main = node.unit_property(PIPELINE, "MainPID")
    status = node.run("cat", f"/proc/{main}/status").stdout
    assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status

    node.run(
        "systemd-run",
        "--unit=pub-1-push-client",
        "--uid=rt",
        "--gid=rt",
        "/opt/rt-appliance/bin/rt",
        "push-client",
        "--config",
        "/etc/rt/rt.yaml",
        "--host",
        "pub-1",
    )
    lines = "".join(
        json.dumps({"sym": f"S{i % 7}", "price": 100 + i / 10, "size": i}) + "\n"
        for i in range(ROWS)
    )
    node.run(
        "runuser", "-u", "rt", "--", "rt", "publish", "--dir", "/srv/pub/pub",
        "--topic", "trades", "--host", "pub-1",
        input_text=lines,
    )  # fmt: skip

    def rows() -> int:
        counted = node.run("/opt/rt-appliance/bin/python", "-c", COUNT_ROWS, check=False)
        return int(counted.stdout.strip()) if counted.returncode == 0 else -1

    try:
        wait_until(lambda: rows() == ROWS, 240, f"{ROWS} Parquet rows", interval_s=1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {rows()} rows\n{journal(node, PIPELINE)}") from None
    assert node.unit_property(PIPELINE, "ActiveState") == "active"

    # A stop is clean: the unit ends inactive, not failed.
    node.run("systemctl", "stop", PIPELINE, timeout_s=120)
    assert node.unit_property(PIPELINE, "ActiveState") == "inactive", journal(node, PIPELINE)

    # format("rt") in a new session of the package's Python, with no line registering it
    # and nothing else set: its .pth names the workers' Python, pyspark_rt the source.
    counted = node.run(
        "runuser", "-u", "rt", "--", "env", f"JAVA_HOME={DEFAULT_JAVA_HOME}",
        "/opt/rt-appliance/bin/python", "-c", READ_MERGED,
        check=False, timeout_s=240,
    )  # fmt: skip
    cause = [
        ln
        for ln in counted.stderr.splitlines()
        if any(word in ln for word in ("Error", "Exception", "WARN", "Caused"))
        and not ln.lstrip().startswith("at ")
    ]
    assert counted.returncode == 0, "\n".join(cause[:20]) + counted.stderr[-3000:]
    assert counted.stdout.split()[-1] == str(ROWS)
