"""The Spark units: rendered on nodes only when rt.yaml enables them, removed when it no
longer does, with the settings a JVM needs; the worker's resource discovery script.

Their golden files, `systemd-analyze verify` and `security --offline` are checked with
every other unit in test_units.py (the same exposure gate of 2.0; they score 1.3).
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml

from rt_appliance.appliance.golden import with_worker
from rt_appliance.appliance.render import (
    RTLOG_SCRIPT,
    render_host,
    spark_home,
    spark_memory_max,
    unit_files,
)
from rt_appliance.certs import init_for_config
from rt_appliance.config import ConfigError, StreamConfig, parse_config
from tests.appliance.test_apply import apply, host_root  # noqa: F401 (a fixture)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TEXT = (ROOT / "etc" / "rt.yaml").read_text()
PIPELINE = "rt-spark-pipeline.service"
WORKER = "rt-spark-worker.service"
NODE_UNITS = ["rt-sequencer.service"]

# The example's spark section, switched in place.
SPARK_OFF = EXAMPLE_TEXT.replace(
    "  enabled: true                  # rt apply renders rt-spark-pipeline",
    "  enabled: false                 # rt apply renders rt-spark-pipeline",
)
WORKER_ON = EXAMPLE_TEXT.replace(
    "    enabled: false               # true: rt apply renders rt-spark-worker",
    "    enabled: true                # true: rt apply renders rt-spark-worker",
).replace("    # master_url: spark://10.0.0.10:7077", "    master_url: spark://10.0.0.10:7077")


def lines(config: StreamConfig, unit: str, host: str = "rt-1") -> list[str]:
    return unit_files(config, host)[unit].splitlines()


def test_the_texts_above_switch_what_they_say() -> None:
    assert SPARK_OFF != EXAMPLE_TEXT and WORKER_ON != EXAMPLE_TEXT
    assert not parse_config(SPARK_OFF).spark.enabled
    worker = parse_config(WORKER_ON).spark.worker
    assert worker.enabled and worker.master_url == "spark://10.0.0.10:7077"


@pytest.mark.parametrize(
    ("text", "units"),
    [
        (SPARK_OFF, NODE_UNITS),
        (EXAMPLE_TEXT, [*NODE_UNITS, PIPELINE]),
        (WORKER_ON, [*NODE_UNITS, PIPELINE, WORKER]),
        # the worker only comes with the pipeline: spark.enabled switches both
        (WORKER_ON.replace("  enabled: true                  #", "  enabled: false #"), NODE_UNITS),
    ],
)
def test_spark_units_render_on_nodes_only_when_enabled(text: str, units: list[str]) -> None:
    config = parse_config(text)
    for node in ("rt-1", "rt-2", "rt-3"):
        assert list(unit_files(config, node)) == units
    assert list(unit_files(config, "pub-1")) == ["rt-push-client.service"]
    assert list(unit_files(config, "sub-1")) == ["rt-pull-client.service"]


def test_pipeline_unit_settings() -> None:
    unit = lines(parse_config(EXAMPLE_TEXT), PIPELINE, "rt-2")
    for line in (
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=/opt/rt-appliance/bin/rt --log-level info spark-pipeline "
        "--config /etc/rt/rt.yaml --node rt-2",
        "Wants=network-online.target rt-sequencer.service",
        "After=network-online.target rt-sequencer.service",
        "User=rt",
        "Group=rt",
        "StateDirectory=rt",
        "WorkingDirectory=/var/lib/rt",
        "TimeoutStartSec=180s",
        "WatchdogSec=60s",
        "Restart=on-failure",
        "SuccessExitStatus=143",
        "KillMode=mixed",  # the driver stops its JVM itself
        "Environment=JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64",
        "Environment=SPARK_HOME=/opt/rt-appliance/spark/pyspark",
        "Environment=PYSPARK_PYTHON=/opt/rt-appliance/bin/python",
        "Environment=SPARK_LOCAL_IP=127.0.0.1",  # local[*]: Spark talks to itself only
        f"MemoryMax={2 << 30}",  # spark.memory 1GiB + 1GiB
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "SystemCallFilter=@system-service",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
    ):
        assert line in unit, line
    # A JVM's JIT writes and then runs code; it also reads /proc beyond its own PIDs.
    assert not any(ln.startswith(("MemoryDenyWriteExecute=", "ProcSubset=")) for ln in unit)
    assert not any(ln.startswith("ReadWritePaths=") for ln in unit)  # output in the data dir


def test_pipeline_settings_follow_the_config() -> None:
    text = (
        EXAMPLE_TEXT.replace("prefix: /opt/rt-appliance", "prefix: /usr/local/rt")
        .replace("data_dir: /var/lib/rt", "data_dir: /srv/rt/{name}")
        .replace("master: local[*]  ", "master: spark://10.0.0.10:7077")
        .replace("  memory: 1GiB    ", "  memory: 4GiB    ")
        .replace("  # java_home: /usr/lib/jvm/java-17", "  java_home: /usr/lib/jvm/java-21")
        .replace("  # output_dir: /srv/parquet/{name}", "  output_dir: /data/parquet/{name}")
    )
    config = parse_config(text)
    assert config.spark.master == "spark://10.0.0.10:7077" and config.spark.memory == 4 << 30
    unit = lines(config, PIPELINE)
    for line in (
        "ExecStart=/usr/local/rt/bin/rt --log-level info spark-pipeline "
        "--config /etc/rt/rt.yaml --node rt-1",
        "ReadWritePaths=/srv/rt/rt-1",
        "ReadWritePaths=/data/parquet/rt-1",  # output outside the data directory
        "WorkingDirectory=/srv/rt/rt-1",
        "Environment=JAVA_HOME=/usr/lib/jvm/java-21-openjdk-amd64",
        "Environment=SPARK_HOME=/usr/local/rt/spark/pyspark",
        "Environment=PYSPARK_PYTHON=/usr/local/rt/bin/python",
        "Environment=SPARK_LOCAL_IP=10.0.0.11",  # executors elsewhere reach the driver
        f"MemoryMax={6 << 30}",  # 4GiB + half of it
    ):
        assert line in unit, line
    made = {f.path: f for f in render_host(config, "rt-1", b"") if f.directory}
    output = made[PurePosixPath("/data/parquet/rt-1")]
    assert (output.owner, output.group, output.mode) == ("rt", "rt", 0o750)


def test_a_failover_pipeline_may_write_the_shared_output_and_checkpoint() -> None:
    text = (
        EXAMPLE_TEXT.replace("  # output_dir: /srv/parquet/{name}", "  output_dir: /mnt/nfs/out")
        .replace("  # checkpoint_dir: /srv/rt-pipeline/checkpoint", "  checkpoint_dir: /mnt/nfs/cp")
        .replace("  failover: false ", "  failover: true  ")
    )
    config = parse_config(text)
    assert config.spark.failover
    unit = lines(config, PIPELINE)
    assert "ReadWritePaths=/mnt/nfs/out" in unit and "ReadWritePaths=/mnt/nfs/cp" in unit
    made = {f.path for f in render_host(config, "rt-1", b"") if f.directory}
    assert {PurePosixPath("/mnt/nfs/out"), PurePosixPath("/mnt/nfs/cp")} <= made


def test_memory_headroom() -> None:
    assert spark_memory_max(256 << 20) == (256 << 20) + (1 << 30)
    assert spark_memory_max(1 << 30) == 2 << 30
    assert spark_memory_max(8 << 30) == 12 << 30


def test_worker_unit_settings() -> None:
    unit = lines(parse_config(WORKER_ON), WORKER, "rt-3")
    for line in (
        "Type=simple",
        "ExecStart=/opt/rt-appliance/bin/rt spark-daemon --config /etc/rt/rt.yaml --host rt-3 "
        "-- /opt/rt-appliance/spark/pyspark/bin/spark-class "
        "org.apache.spark.deploy.worker.Worker --host 10.0.0.13 --port 7078 --webui-port 8081 "
        "--cores 2 --memory 2048m --work-dir /var/lib/rt/spark/work spark://10.0.0.10:7077",
        "User=rt",
        "StateDirectory=rt",
        "SuccessExitStatus=143",
        "Restart=on-failure",
        "Environment=JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64",
        "Environment=SPARK_HOME=/opt/rt-appliance/spark/pyspark",
        "Environment=PYSPARK_PYTHON=/opt/rt-appliance/bin/python",
        "Environment=SPARK_DAEMON_MEMORY=512m",
        f"MemoryMax={(2 << 30) + (1 << 30) + (512 << 20)}",
        "ProtectSystem=strict",
    ):
        assert line in unit, line
    prefix = 'Environment="SPARK_WORKER_OPTS='
    opts = next(ln for ln in unit if ln.startswith(prefix)).removeprefix(prefix).rstrip('"')
    for option in (
        "-Dspark.worker.resource.rtlog.amount=1",
        f"-Dspark.worker.resource.rtlog.discoveryScript={RTLOG_SCRIPT}",
        "-Dspark.worker.cleanup.enabled=true",
    ):
        assert option in opts.split(), option
    assert not any(ln.startswith(("WatchdogSec=", "MemoryDenyWriteExecute=")) for ln in unit)
    # the web UI on localhost (rt spark-daemon sets SPARK_LOCAL_IP), RPC on --host
    assert not any(ln.startswith("Environment=SPARK_LOCAL_IP=") for ln in unit)


MASTER = "rt-spark-master.service"


def test_the_master_unit_runs_on_the_host_the_master_url_names() -> None:
    config = with_master_url(parse_config(WORKER_ON), "spark://10.0.0.11:7077")  # rt-1's
    assert config.spark_master_host() == "rt-1"
    unit = lines(config, MASTER, "rt-1")
    for line in (
        "ExecStart=/opt/rt-appliance/bin/rt spark-daemon --config /etc/rt/rt.yaml --host rt-1 "
        "-- /opt/rt-appliance/spark/pyspark/bin/spark-class "
        "org.apache.spark.deploy.master.Master --host 10.0.0.11 --port 7077 --webui-port 8080",
        "User=rt",
        "Restart=on-failure",
        "SuccessExitStatus=143",
        "ProtectSystem=strict",
    ):
        assert line in unit, line
    for host in ("rt-2", "rt-3"):
        assert MASTER not in unit_files(config, host)
    # named by host name, on a publisher host: rendered there; outside the stream: nowhere
    by_name = with_master_url(config, "spark://pub-1:7077")
    assert by_name.spark_master_host() == "pub-1"
    assert MASTER in unit_files(by_name, "pub-1")
    outside = with_master_url(config, "spark://spark.example.com:7077")
    assert outside.spark_master_host() is None
    assert not any(MASTER in unit_files(outside, h.name) for h in outside.all_hosts())


def with_master_url(config: StreamConfig, url: str) -> StreamConfig:
    spark = config.spark.model_copy(
        update={"master": url, "worker": config.spark.worker.model_copy(update={"master_url": url})}
    )
    return config.model_copy(update={"spark": spark})


def test_discovery_script_prints_the_rtlog_resource(tmp_path: Path) -> None:
    files = {f.path: f for f in render_host(with_worker(parse_config(EXAMPLE_TEXT)), "rt-1", b"")}
    script = files[RTLOG_SCRIPT]
    assert script.mode == 0o755 and script.content.startswith(b"#!/bin/sh\n")
    path = tmp_path / "rtlog-resource.sh"
    path.write_bytes(script.content)
    path.chmod(script.mode)
    out = subprocess.run([str(path)], capture_output=True, text=True, check=True, timeout=10)
    assert json.loads(out.stdout) == {"name": "rtlog", "addresses": ["0"]}
    # without the worker, no script
    without = render_host(parse_config(EXAMPLE_TEXT), "rt-1", b"")
    assert RTLOG_SCRIPT not in {f.path for f in without}


def test_spark_home_is_where_the_spark_package_puts_pyspark() -> None:
    home = spark_home(parse_config(EXAMPLE_TEXT))
    assert str(home) == "/opt/rt-appliance/spark/pyspark"
    nfpm = yaml.safe_load((ROOT / "packaging/nfpm-spark.yaml").read_text())
    destinations = {entry["dst"] for entry in nfpm["contents"]}
    assert str(home.parent) in destinations  # pip install --target <that>: <that>/pyspark
    pth = "/opt/rt-appliance/lib/python3.11/site-packages/rt-appliance-spark.pth"
    assert pth in destinations
    build = (ROOT / "packaging/build.sh").read_text()
    assert f"--target {home.parent}" in build
    # the .pth names that directory, on a line of its own
    assert f"            echo {home.parent}\n" in build and "rt-appliance-spark.pth" in build


def test_apply_writes_spark_units_when_enabled_and_removes_them_when_disabled(
    host_root: tuple[Path, Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, root = host_root
    units = root / "etc/systemd/system"
    code, out, _ = apply(capsys, config, root)
    assert code == 0 and f"created /etc/systemd/system/{PIPELINE}" in out
    assert (units / PIPELINE).read_text() == (ROOT / "systemd/rt-1" / PIPELINE).read_text()
    assert not (units / WORKER).exists()

    config.write_text(WORKER_ON)
    code, out, _ = apply(capsys, config, root)
    assert code == 0
    assert f"created /etc/systemd/system/{WORKER}" in out
    assert f"created {RTLOG_SCRIPT}" in out
    assert (units / WORKER).read_text() == (ROOT / "systemd/rt-1-spark-worker" / WORKER).read_text()
    script = root / str(RTLOG_SCRIPT).lstrip("/")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    out_json = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    assert json.loads(out_json) == {"name": "rtlog", "addresses": ["0"]}

    config.write_text(SPARK_OFF)
    code, out, _ = apply(capsys, config, root)
    assert code == 0
    assert f"removed /etc/systemd/system/{PIPELINE}" in out
    assert f"removed /etc/systemd/system/{WORKER}" in out
    assert sorted(p.name for p in units.iterdir()) == sorted(NODE_UNITS)
    code, out, _ = apply(capsys, config, root)
    assert code == 0 and "nothing to change" in out


def test_apply_refuses_a_cluster_host_without_a_fit_spark_secret(
    host_root: tuple[Path, Path],  # noqa: F811 (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, root = host_root
    config.write_text(WORKER_ON)  # rt-1 runs a worker of the stream's cluster
    secret = root / "etc/rt/tls/spark.secret"
    secret.chmod(0o644)
    code, _, err = apply(capsys, config, root)
    assert code != 0 and "spark.secret can be read by every user" in err
    secret.unlink()
    code, _, err = apply(capsys, config, root)
    assert code != 0 and "spark.secret is missing" in err
    assert not (root / "etc/systemd/system").exists()  # nothing written
    # local mode needs no secret
    config.write_text(EXAMPLE_TEXT)
    assert apply(capsys, config, root)[0] == 0


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("spark.authenticate: 'false'", "runs with spark.authenticate=true"),
        ("spark.network.crypto.enabled: 'false'", "spark.network.crypto.enabled=true"),
        ("spark.authenticate.secret: abc", "the Spark secret is not kept in rt.yaml"),
    ],
)
def test_validate_refuses_a_cluster_without_its_security(conf: str, message: str) -> None:
    text = WORKER_ON.replace("  conf: {}", "  conf: {" + conf + "}")
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(text)
    parse_config(EXAMPLE_TEXT.replace("  conf: {}", "  conf: {" + conf + "}"))  # local: fine


def test_two_masters_are_refused() -> None:
    text = WORKER_ON.replace("  master: local[*] ", "  master: spark://10.0.0.11:7077 ")
    with pytest.raises(ConfigError, match="name different masters"):
        parse_config(text)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("", "failover needs output_dir on storage every node mounts"),
        ("  output_dir: /nfs/{name}\n", "not one per node ({name})"),
        ("  output_dir: /nfs/o\n", "failover needs checkpoint_dir on storage every node mounts"),
        ("  output_dir: /nfs/o\n  checkpoint_dir: /nfs/o\n", "may not hold one another"),
        ("  output_dir: /nfs/o\n  checkpoint_dir: /nfs/o/cp\n", "may not hold one another"),
    ],
)
def test_validate_refuses_failover_without_shared_directories(edit: str, message: str) -> None:
    text = EXAMPLE_TEXT.replace("  failover: false ", edit + "  failover: true  ")
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(text)


def test_a_spark_daemon_gets_the_secret_in_its_environment_only(tmp_path: Path) -> None:
    from rt_appliance.spark.security import daemon_env

    text = WORKER_ON.replace("dir: /etc/rt/tls", f"dir: {tmp_path}")
    config = parse_config(text)
    init_for_config(config, tmp_path, days=30, force=False)
    env = daemon_env(config, "rt-1", {"SPARK_DAEMON_JAVA_OPTS": "-Xss4m", "PATH": "/bin"})
    assert env["_SPARK_AUTH_SECRET"] == (tmp_path / "spark.secret").read_text().strip()
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"  # web UI on localhost
    opts = env["SPARK_DAEMON_JAVA_OPTS"].split()
    for option in (
        "-Dspark.authenticate=true",
        "-Dspark.network.crypto.enabled=true",
        "-Dspark.io.encryption.enabled=true",
        "-Dspark.master.rest.enabled=false",
        "-Xss4m",
    ):
        assert option in opts
    assert not any(env["_SPARK_AUTH_SECRET"] in value for value in opts)
