"""A standalone Spark cluster of the stream, authenticated and encrypted: real processes.

A master and a worker run as their units run them (`rt spark-daemon` around
`spark-class`), with the stream's Spark secret from `rt certs init`. A job whose session
comes from `session_on_cluster` reads a stream directory with `format("rt")` on the
cluster. A worker without the secret, a worker with another stream's secret and a
driver without the secret are each refused, and the master never lists them. The
secret is on no process's command line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rt_appliance.certs import init_for_config, read_secret
from rt_appliance.config import StreamConfig, load_config
from rt_appliance.publish import Publisher

pytestmark = pytest.mark.slow

RT = [sys.executable, "-m", "rt_appliance.cli"]
MESSAGES = 1000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.5)


@dataclass
class Cluster:
    work: Path
    config_path: Path
    config: StreamConfig
    master_port: int
    webui_port: int
    processes: list[subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's JSON, on localhost)."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    def alive_workers(self) -> list[str]:
        return [w["id"] for w in self.state()["workers"] if w["state"] == "ALIVE"]

    def start(self, name: str, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.processes.append(proc)
        return proc, log

    def worker(self, name: str, wrapper: list[str] | None) -> tuple[subprocess.Popen[bytes], Path]:
        """A worker joining the master; ``wrapper``: what runs spark-class (None: nothing,
        so no secret and no authentication)."""
        spark_class = [
            _spark_class(),
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1",
            "--port", str(_free_port()),
            "--webui-port", str(_free_port()),
            "--cores", "1",
            "--memory", "1g",
            "--work-dir", str(self.work / f"{name}-work"),
            self.url,
        ]  # fmt: skip
        return self.start(name, [*(wrapper or []), *spark_class])

    def daemon(self, config_path: Path | None = None) -> list[str]:
        """`rt spark-daemon` as the units run it, with ``config_path``'s secret."""
        config = str(config_path or self.config_path)
        return [*RT, "spark-daemon", "--config", config, "--host", "rt-1", "--"]


def _write_config(work: Path, name: str, master_port: int, webui_port: int) -> Path:
    doc = {
        "stream": name,
        "nodes": [{"name": "rt-1", "host": "127.0.0.1"}],
        "publishers": [{"name": "pub-1", "host": "127.0.0.2", "topics": ["ticks"]}],
        "subscribers": [{"name": "sub-1", "host": "127.0.0.3"}],
        "data_dir": str(work / name / "data"),
        "tls": {"dir": str(work / name / "tls")},
        "spark": {
            "enabled": True,
            "master": f"spark://127.0.0.1:{master_port}",
            "master_webui_port": webui_port,
            "worker": {"enabled": True, "master_url": f"spark://127.0.0.1:{master_port}"},
        },
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    init_for_config(load_config(path), work / name / "tls", days=30, force=False)
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("spark-cluster")
    master_port, webui_port = _free_port(), _free_port()
    config_path = _write_config(work, "cluster", master_port, webui_port)
    made = Cluster(work, config_path, load_config(config_path), master_port, webui_port, [])
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python workers
    try:
        master = [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(master_port), "--webui-port", str(webui_port)]
        made.start("master", [*made.daemon(), *master])
        wait_for(lambda: _answers(made), "the master's web UI")
        made.worker("worker", made.daemon())
        wait_for(lambda: len(made.alive_workers()) == 1, "the worker registered")
        yield made
    finally:
        for proc in reversed(made.processes):
            if proc.poll() is None:
                proc.terminate()
        for proc in made.processes:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _answers(cluster: Cluster) -> bool:
    try:
        cluster.state()
    except OSError:
        return False
    return True


DRIVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from rt_appliance.config import load_config
    from rt_appliance.spark.security import session_on_cluster

    config_path, directory, secured = sys.argv[1], sys.argv[2], sys.argv[3] == "secured"
    builder = (
        SparkSession.builder.appName("rt-cluster-test")
        .config("spark.cores.max", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.ui.enabled", "false")
    )
    if secured:
        spark = session_on_cluster(builder, load_config(config_path), "rt-1")
    else:  # the master URL and nothing else
        spark = builder.master(load_config(config_path).spark.master).getOrCreate()
    import rt_appliance.spark

    rt_appliance.spark.register(spark)
    rows = spark.read.format("rt").load(directory).collect()
    print("ROWS", len(rows), len({bytes(r.payload) for r in rows}), flush=True)
    spark.stop()
    """
)


def _driver(cluster: Cluster, directory: Path, secured: bool) -> list[str]:
    script = cluster.work / "driver.py"
    script.write_text(DRIVER)
    mode = "secured" if secured else "plain"
    return [sys.executable, str(script), str(cluster.config_path), str(directory), mode]


def test_a_job_with_the_secret_reads_the_stream_on_the_cluster(cluster: Cluster) -> None:
    directory = cluster.work / "pub"
    with Publisher(directory, "ticks", "pub-1") as publisher:
        for n in range(MESSAGES):
            publisher.publish(f"tick-{n}".encode())
    done = subprocess.run(
        _driver(cluster, directory / "ticks.pub-1", secured=True),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ROWS {MESSAGES} {MESSAGES}" in done.stdout
    finished = cluster.state()["completedapps"]
    assert [app["name"] for app in finished] == ["rt-cluster-test"]
    # the secret was never on a command line
    secret = read_secret(cluster.config.tls.spark_secret("rt-1"))
    for proc in cluster.processes:
        for pid in [proc.pid, *_children(proc.pid)]:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                assert secret.encode() not in cmdline.read()
    assert not list(Path("/tmp").glob("rt-spark-*/driver.properties"))  # removed once read


def test_a_worker_without_the_secret_is_refused(cluster: Cluster) -> None:
    workers = cluster.alive_workers()
    proc, log = cluster.worker("no-secret", None)
    try:
        wait_for(lambda: "SASL" in log.read_text(errors="replace"), "the master refusing it")
        assert cluster.alive_workers() == workers
    finally:
        proc.kill()


def test_a_worker_with_another_streams_secret_is_refused(cluster: Cluster) -> None:
    other = _write_config(cluster.work, "other", cluster.master_port, cluster.webui_port)
    workers = cluster.alive_workers()
    proc, log = cluster.worker("other-secret", cluster.daemon(other))
    try:
        wait_for(
            lambda: "Exception while bootstrapping client" in log.read_text(errors="replace"),
            "the master refusing it",
        )
        assert cluster.alive_workers() == workers
    finally:
        proc.kill()


def test_a_driver_without_the_secret_is_refused(cluster: Cluster) -> None:
    apps = len(cluster.state()["activeapps"]) + len(cluster.state()["completedapps"])
    proc, log = cluster.start("plain-driver", _driver(cluster, cluster.work, secured=False))
    try:
        wait_for(lambda: "SASL" in log.read_text(errors="replace"), "the master refusing it")
        state = cluster.state()
        assert len(state["activeapps"]) + len(state["completedapps"]) == apps
    finally:
        proc.kill()


def test_a_missing_secret_stops_a_daemon_before_spark_starts(cluster: Cluster) -> None:
    secret = cluster.config.tls.spark_secret("rt-1")
    hidden = secret.with_name("spark.secret.away")
    secret.rename(hidden)
    try:
        done = subprocess.run(
            [*cluster.daemon(), "/bin/echo", "started"], capture_output=True, text=True, timeout=60
        )
    finally:
        hidden.rename(secret)
    assert done.returncode != 0 and "started" not in done.stdout
    assert f"{secret} is missing" in done.stderr and "rt certs init" in done.stderr


def _children(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            kids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        found += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return found
