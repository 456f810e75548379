"""The batch read of ``rt bench spark`` through a standalone Spark cluster on this machine.

A master and ``workers`` workers (one core each) run on 127.0.0.1 as the stream's units
run them: with the environment :func:`~rt_appliance.spark.security.daemon_env` gives
``rt spark-daemon`` (the stream's Spark secret, authentication and encryption on), the
workers advertising the ``rtlog`` resource with the settings and the discovery script
``rt apply`` renders for ``rt-spark-worker.service``. The secret is a new one, made in
the cluster's temporary directory. The driver is a process of its own (a PySpark
session takes its JVM's settings when the first session of a process starts), whose
session comes from :func:`~rt_appliance.spark.security.session_on_cluster` and asks
for ``rtlog`` as ``rt spark-pipeline`` does; it reads the log each time it is told to
(a line on a connection it makes to the bench), so that the bench can alternate local
and cluster runs.

Every process runs as the peers' servers do (:mod:`rt_lab.bench.peers.process`): in a
process group of its own, which Ctrl-C at the terminal does not reach, stopped with its
group (the worker's executors and their Python workers with it) on the way out, also on
an error, Ctrl-C or SIGTERM. The driver is told to stop its session first (its connection closed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import yaml

from rt_appliance.appliance.render import RTLOG_SCRIPT, render_host
from rt_appliance.appliance.roles import SPARK_WORKER
from rt_appliance.certs.secret import make_secret
from rt_appliance.config import StreamConfig, load_config
from rt_appliance.errors import RTError
from rt_appliance.spark.security import daemon_env
from rt_lab.bench.peers.process import ServerGroup, ServerProcess, free_ports

__all__ = ["ClusterReader", "StandaloneCluster"]

HOST = "rt-1"  # the one node of the bench's stream: every daemon runs as its host
ADDRESS = "127.0.0.1"
WORKER_CORES = 1
EXECUTOR_MEMORY = "1g"  # as much as a worker offers
_WORKER_MEMORY = 1 << 30
_READY_S = 120.0
_DRIVER_STOP_S = 15.0  # to stop its session, before its group is signalled


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def unit_environment(unit: str, name: str) -> str:
    """The value of ``Environment=NAME=...`` in the text of a systemd unit."""
    for line in unit.splitlines():
        if line.startswith("Environment="):
            key, _, value = line.removeprefix("Environment=").strip('"').partition("=")
            if key == name:
                return value
    raise RTError(f"the unit sets no {name}")


def _stream_doc(root: Path, master_port: int, webui_port: int) -> dict[str, Any]:
    """rt.yaml of a one-node stream whose Spark cluster has its master on this machine."""
    url = f"spark://{ADDRESS}:{master_port}"
    return {
        "stream": "bench",
        "nodes": [{"name": HOST, "host": ADDRESS}],
        "publishers": [{"name": "pub-1", "host": "127.0.0.2", "topics": ["bench"]}],
        "subscribers": [{"name": "sub-1", "host": "127.0.0.3"}],
        "data_dir": str(root / "data"),
        "tls": {"dir": str(root / "tls")},
        "spark": {
            "enabled": True,
            "master": url,
            "master_webui_port": webui_port,
            "worker": {
                "enabled": True,
                "master_url": url,
                "cores": WORKER_CORES,
                "memory": _WORKER_MEMORY,
            },
        },
    }


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


class StandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1, secured as the stream's cluster;
    a context manager that stops every process it started."""

    def __init__(
        self, root: Path, workers: int, progress: Callable[[str], None] = lambda _: None
    ) -> None:
        self.root, self.workers, self.progress = root, workers, progress
        self.servers = ServerGroup(_READY_S)
        self.started: list[ServerProcess] = []
        self.config_path = root / "rt.yaml"
        self.webui_port = 0
        self._sigterm: Any = None

    def __enter__(self) -> StandaloneCluster:
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def config(self) -> StreamConfig:
        return load_config(self.config_path)

    @property
    def groups(self) -> list[int]:
        """The process groups started here, one per process (its pid)."""
        return [s.proc.pid for s in self.started if s.proc is not None]

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        master_port, self.webui_port = free_ports(2)
        doc = _stream_doc(self.root, master_port, self.webui_port)
        self.config_path.write_text(yaml.safe_dump(doc))
        config = self.config
        secret = config.tls.spark_secret(HOST)
        secret.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(make_secret())
        # the worker as rt apply renders its unit: the rtlog resource and its script
        files = {str(f.path): f.content for f in render_host(config, HOST, b"")}
        unit = next(
            text.decode() for path, text in files.items() if path.endswith(SPARK_WORKER.unit)
        )
        script = self.root / RTLOG_SCRIPT.name
        script.write_bytes(files[str(RTLOG_SCRIPT)])
        script.chmod(0o755)
        env = daemon_env(config, HOST, os.environ)
        env["SPARK_DAEMON_MEMORY"] = unit_environment(unit, "SPARK_DAEMON_MEMORY")
        env["PYSPARK_PYTHON"] = sys.executable
        worker_opts = unit_environment(unit, "SPARK_WORKER_OPTS")
        worker_opts = worker_opts.replace(str(RTLOG_SCRIPT), str(script))

        self.progress(f"cluster: a Spark master on {ADDRESS}:{master_port}")
        master = [spark_class(), "org.apache.spark.deploy.master.Master", "--host", ADDRESS]
        master += ["--port", str(master_port), "--webui-port", str(self.webui_port)]
        self._start(ServerProcess("master", master, self.root / "master.log", env))
        self.servers.wait("the Spark master's web UI", lambda: bool(self.state()))
        worker = config.spark.worker
        self.progress(f"cluster: {self.workers} workers of {worker.cores} core, rtlog")
        ports = free_ports(2 * self.workers)
        workers = []
        for n in range(1, self.workers + 1):
            work = self.root / f"worker-{n}"
            (work / "local").mkdir(parents=True)
            argv = [
                spark_class(), "org.apache.spark.deploy.worker.Worker",
                "--host", ADDRESS,
                "--port", str(ports[2 * n - 2]),
                "--webui-port", str(ports[2 * n - 1]),
                "--cores", str(worker.cores),
                "--memory", f"{worker.memory >> 20}m",
                "--work-dir", str(work / "work"),
                worker.master_url or "",
            ]  # fmt: skip
            local = {"SPARK_WORKER_OPTS": worker_opts, "SPARK_LOCAL_DIRS": str(work / "local")}
            workers.append(ServerProcess(f"worker-{n}", argv, work / "worker.log", env | local))
        self._start(*workers)
        self.servers.wait(
            f"{self.workers} Spark workers offering rtlog",
            lambda: len(self.alive_workers()) == self.workers,
        )

    def _start(self, *servers: ServerProcess) -> None:
        self.started.extend(servers)
        self.servers.start(*servers)

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's JSON, on localhost)."""
        url = f"http://{ADDRESS}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master lists as alive and offering the rtlog resource."""
        workers = self.state()["workers"]
        return [w for w in workers if w["state"] == "ALIVE" and "rtlog" in w.get("resources", {})]

    def driver(self, directory: Path, rows: int) -> ClusterReader:
        """A driver on the cluster reading ``directory``, warmed up: it has counted
        ``rows`` rows (or raised) and read them once into the ``noop`` sink."""
        scratch = self.root / "driver"
        scratch.mkdir()
        with socket.create_server((ADDRESS, 0)) as listener:
            listener.settimeout(0.5)
            argv = [sys.executable, "-m", "rt_lab.bench.spark_cluster", str(self.config_path)]
            argv += [str(directory), str(scratch), str(self.workers)]
            argv.append(str(listener.getsockname()[1]))
            env = {"PYSPARK_PYTHON": sys.executable}
            driver = _Driver("driver", argv, scratch / "driver.log", env)
            self._start(driver)
            deadline = time.monotonic() + _READY_S
            while driver.connection is None:
                with contextlib.suppress(TimeoutError):
                    driver.connection = listener.accept()[0]
                if driver.exited() is not None or time.monotonic() > deadline:
                    raise RTError(f"cluster: the driver did not start:\n{driver.log_tail()}")
        driver.connection.settimeout(None)
        reader = ClusterReader(driver)
        ready = reader.answer("ready")
        reader.rows, reader.partitions = int(ready["rows"]), int(ready["partitions"])
        reader.executors = int(ready["executors"])
        if reader.rows != rows:
            raise RTError(f"cluster: the rt read gave {reader.rows:,} rows, not {rows:,}")
        return reader

    def stop(self) -> None:
        """Stop every process started here, the driver first, the master last."""
        self.servers.stop()
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None


class _Driver(ServerProcess):
    """The driver's process, told what to do over a connection it makes to the bench."""

    connection: socket.socket | None = None

    def stop(self, grace_s: float = _DRIVER_STOP_S) -> None:
        """The end of its connection first: it stops its session and exits."""
        if self.connection is not None:  # shut down: the reader's file shares it
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            self.connection.close()
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(grace_s)
        super().stop(grace_s)


class ClusterReader:
    """The driver on the cluster: :meth:`read` times one read of the log into ``noop``."""

    def __init__(self, driver: _Driver) -> None:
        assert driver.connection is not None
        self.driver = driver
        self.stream = driver.connection.makefile("rwb")
        self.rows = self.partitions = self.executors = 0

    def answer(self, kind: str) -> dict[str, Any]:
        for raw in self.stream:
            line = raw.decode(errors="replace").strip()
            if line.startswith(f"{kind} "):
                found: dict[str, Any] = json.loads(line.split(" ", 1)[1])
                return found
        raise RTError(
            f"cluster: the driver went away before it was {kind}; its log ends:\n"
            f"{self.driver.log_tail()}"
        )

    def read(self) -> float:
        """Seconds the driver took to read every row of the log into ``noop``."""
        self.stream.write(b"read\n")
        self.stream.flush()
        return float(self.answer("read")["seconds"])


# -- the driver's process ----------------------------------------------------------------


def _driver_main(
    config_path: Path, directory: str, scratch: Path, executors: int, port: int
) -> None:
    from pyspark.sql import SparkSession

    from rt_appliance.spark.security import session_on_cluster
    from rt_lab.bench.spark_bench import (
        SYNTHETIC,
        noop_seconds,
        ready_session,
        session_builder,
    )

    bench = socket.create_connection((ADDRESS, port)).makefile("rwb")

    def say(kind: str, found: dict[str, Any]) -> None:
        bench.write(f"{kind} {json.dumps(found)}\n".encode())
        bench.flush()

    builder = session_builder(SparkSession.builder.appName("rt bench spark, cluster"), scratch)
    builder = builder.config("spark.executor.memory", EXECUTOR_MEMORY)
    # as rt spark-pipeline asks: executors only on workers offering the merged log
    builder = builder.config("spark.executor.resource.rtlog.amount", "1")
    spark = ready_session(session_on_cluster(builder, load_config(config_path), HOST))
    try:
        status = spark.sparkContext._jsc.sc()
        deadline = time.monotonic() + _READY_S
        while status.getExecutorMemoryStatus().size() - 1 < executors:  # and the driver
            if time.monotonic() > deadline:
                raise RTError(f"not {executors} executors within {_READY_S:.0f} s")
            time.sleep(0.25)

        def frame() -> Any:
            return spark.read.format("rt").load(directory)

        # a task on every executor (one core each): each starts its Python workers
        spread = spark.read.format(SYNTHETIC).option("partitions", str(2 * executors))
        noop_seconds(spread.option("rows", str(100_000)).load())
        rows = frame().count()
        partitions = frame().rdd.getNumPartitions()
        noop_seconds(frame())
        found = status.getExecutorMemoryStatus().size() - 1
        say("ready", {"rows": rows, "partitions": partitions, "executors": found})
        for line in bench:  # until the bench closes the connection
            if line.strip() == b"read":
                say("read", {"seconds": noop_seconds(frame())})
    finally:
        spark.stop()


if __name__ == "__main__":
    args = sys.argv[1:]
    _driver_main(Path(args[0]), args[1], Path(args[2]), int(args[3]), int(args[4]))
