"""``rt spark-pipeline``: a node's merged log to Parquet, exactly once, with a checkpoint.

On RT node ``node`` it reads ``<data_dir>/merged`` with the ``rt`` data source as a
stream, applies the configured transform (``spark.transform``, ``module:function``,
DataFrame in and out; none keeps the rows as they are), and appends Parquet to
``spark.output_dir`` (default ``<data_dir>/spark/output``), partitioned by ``topic``
and ``date`` (added from ``timestamp`` when the transform leaves none). Files of
the node::

    <data_dir>/spark/checkpoint/          Spark's offsets and commits: exactly once
    <data_dir>/spark/output/              Parquet (read it with Spark: _spark_metadata)
    <data_dir>/holds/spark-pipeline.json  the committed position, for the archiver

Spark's file sink and the checkpoint make the output exactly once across restarts
and kill -9: a batch logged but not committed is replayed with the same offsets.
Under systemd it reports READY=1 once the query runs, then STATUS lines and
watchdog pings while it does.

With ``spark.failover``, the checkpoint and the output live on storage every node
mounts, and the pipelines of all nodes run but one works: the one whose node holds
the ``spark-pipeline`` lease (:mod:`rt_appliance.sequencer.leases`). Every node's
merged log is the same bytes at the same positions, so the next holder continues
from the shared checkpoint exactly where the last one committed. The others stand
by with a session ready, and hold their node's merged log from the checkpoint's
position on.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rt_appliance.config.model import StreamConfig
from rt_appliance.daemons.notify import Notifier
from rt_appliance.errors import RTError, UsageError
from rt_appliance.limits import STATUS_LINE_EVERY_S
from rt_appliance.position import Position
from rt_appliance.sequencer.holds import hold_path, write_hold
from rt_appliance.sequencer.leases import LeaseView
from rt_appliance.spark.java import find_java
from rt_appliance.spark.security import session_on_cluster
from rt_appliance.subscribe import Subscriber

__all__ = [
    "HOLD_NAME",
    "LEASE_NAME",
    "PipelinePaths",
    "build_session",
    "checkpoint_position",
    "paths_of",
    "run_pipeline",
]

log = logging.getLogger(__name__)

HOLD_NAME = "spark-pipeline"
LEASE_NAME = "spark-pipeline"
LEASE_POLL_S = 0.5  # how often a pipeline looks at its lease (and a standby at the checkpoint)
_PARTITION_COLUMNS = ("topic", "date")


@dataclass(frozen=True, slots=True)
class PipelinePaths:
    merged: Path
    output: Path
    checkpoint: Path
    hold: Path
    scratch: Path


def paths_of(config: StreamConfig, node: str) -> PipelinePaths:
    data_dir = config.data_dir_of(config.node(node))
    spark_dir = data_dir / "spark"
    configured = config.spark.output_dir
    output = Path(configured.replace("{name}", node)) if configured else spark_dir / "output"
    return PipelinePaths(
        merged=data_dir / "merged",
        output=output,
        checkpoint=Path(config.spark.checkpoint_dir or spark_dir / "checkpoint"),
        hold=hold_path(data_dir, HOLD_NAME),
        scratch=spark_dir / "tmp",
    )


def load_transform(spec: str | None) -> Callable[[Any], Any] | None:
    """The function ``module:function`` names; a clear error if it cannot be imported."""
    if spec is None:
        return None
    module_name, _, function_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"spark.transform {spec!r}: cannot import {module_name}: {exc}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(f"spark.transform {spec!r}: {module_name} has no function {function_name}")
    return function  # type: ignore[no-any-return]


def build_session(config: StreamConfig, node: str, paths: PipelinePaths) -> Any:
    """A SparkSession as the pipeline runs it (the ``rt`` source registered)."""
    spark_config = config.spark
    find_java(spark_config.java_home)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths.scratch.mkdir(parents=True, exist_ok=True)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(spark_config.master)
        .appName(f"rt-pipeline {config.stream} {node}")
        .config("spark.driver.memory", spark_config.driver_memory)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.local.dir", str(paths.scratch))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
    )
    for key, value in spark_config.conf.items():
        builder = builder.config(key, value)
    if not spark_config.master.startswith("spark://"):
        spark = builder.getOrCreate()
    else:  # the stream's cluster: only on workers of nodes, authenticated and encrypted
        builder = builder.config("spark.executor.resource.rtlog.amount", "1")
        spark = session_on_cluster(builder, config, node)
    import rt_appliance.spark

    rt_appliance.spark.register(spark)
    return spark


def start_query(spark: Any, config: StreamConfig, paths: PipelinePaths, once: bool) -> Any:
    """Start the streaming query: merged log -> transform -> Parquet."""
    from pyspark.sql import functions as F

    s = config.spark
    reader = (
        spark.readStream.format("rt")
        .option("codec", s.codec)
        .option("maxBytesPerTrigger", str(s.max_bytes_per_trigger))
        .option("holdFile", str(paths.hold))
    )
    if s.schema_ddl is not None:
        reader = reader.option("schema", s.schema_ddl)
    if s.topics:
        reader = reader.option("topics", ",".join(s.topics))
    frame = reader.load(str(paths.merged))
    transform = load_transform(s.transform)
    if transform is not None:
        frame = transform(frame)
        if not hasattr(frame, "writeStream"):
            raise UsageError(f"spark.transform {s.transform}: did not return a DataFrame")
    if "date" not in frame.columns and "timestamp" in frame.columns:
        frame = frame.withColumn("date", F.to_date("timestamp"))
    writer = (
        frame.writeStream.format("parquet")
        .option("path", str(paths.output))
        .option("checkpointLocation", str(paths.checkpoint))
        .partitionBy(*[c for c in _PARTITION_COLUMNS if c in frame.columns])
        .outputMode("append")
        .queryName("rt_pipeline")
    )
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{s.trigger_interval_ms} milliseconds")
    return writer.start()


def run_pipeline(
    config: StreamConfig, node: str, once: bool, stop: threading.Event | None = None
) -> dict[str, Any]:
    """Run the pipeline until ``stop`` is set (or, ``once``, until caught up).

    Returns what its last micro-batch did. A query that fails raises :class:`RTError`
    with Spark's reason (a pruned gap, a corrupt record: the source's own message).
    """
    if not config.spark.enabled:
        log.warning("spark.enabled is false in the configuration; running anyway")
    if once and config.spark.failover:
        raise UsageError(
            "--once writes the shared checkpoint without the lease, beside the pipeline that "
            "holds it: with spark.failover, run the pipeline unit (it works while its node "
            "holds the lease)"
        )
    paths = paths_of(config, node)
    if not paths.merged.is_dir():
        raise UsageError(f"{paths.merged}: no merged log on node {node} (is rt-sequencer running?)")
    notifier = Notifier()
    stop = stop or threading.Event()
    if config.spark.failover and not once:
        return _run_under_lease(config, node, paths, notifier, stop)
    spark = build_session(config, node, paths)
    query = start_query(spark, config, paths, once)
    notifier.ready(f"query running, output {paths.output}")
    log.info("pipeline on %s: %s -> %s", node, paths.merged, paths.output)
    return _run_query(query, paths, notifier, stop, lambda: True)


def _run_query(
    query: Any,
    paths: PipelinePaths,
    notifier: Notifier,
    stop: threading.Event,
    still: Callable[[], bool],
    every: float | None = None,
) -> dict[str, Any]:
    """Keep ``query`` running while ``still()`` and until ``stop``; then stop it."""
    every = every or notifier.watchdog_s or STATUS_LINE_EVERY_S
    held: Position | None = None
    try:
        while not stop.is_set() and query.isActive and still():
            query.awaitTermination(every)
            notifier.watchdog()
            notifier.status(_status_line(query))
            held = _hold_committed(query, paths.hold, held)
    finally:
        if query.isActive:
            notifier.stopping()
            query.stop()
        _hold_committed(query, paths.hold, held)
    failure = query.exception()
    if failure is not None:
        raise RTError(f"the Spark pipeline failed: {_reason(failure)}")
    return dict(query.lastProgress or {})


class _LeaseKeeper:
    """A thread saying that this pipeline wants the lease, every LEASE_POLL_S, whatever
    Spark's calls on the main thread wait on (a query's start can take seconds on a
    busy node, longer than a want stays fresh), and stopping the running query as soon
    as the lease can no longer be trusted."""

    def __init__(self, view: LeaseView) -> None:
        self.view = view
        self.lost = threading.Event()  # the running query was stopped for it
        self._query: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._want()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def running(self, query: Any) -> None:
        with self._lock:
            self._query = query
            self.lost.clear()

    def idle(self) -> None:
        with self._lock:
            self._query = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.view.give_up()

    def _want(self) -> None:
        try:
            self.view.want()
        except OSError as exc:  # the node's data directory: a full disk, EIO
            log.warning("cannot say this pipeline wants the %s lease: %s", LEASE_NAME, exc)

    def _run(self) -> None:
        while not self._stop.wait(LEASE_POLL_S):
            try:
                self._look()
            except Exception:  # never end quietly: the want would go stale for good
                log.exception("lease keeper: looking at the %s lease failed", LEASE_NAME)

    def _look(self) -> None:
        self._want()
        with self._lock:
            query = self._query
        if query is None or self.lost.is_set() or self.view.state().trust_s > 0:
            return
        self.lost.set()
        log.warning("the %s lease is ending without a renewal: stopping", LEASE_NAME)
        try:
            query.stop()
        except Exception as exc:  # py4j: the JVM may be going down too
            log.warning("stopping the query: %s", exc)


def _run_under_lease(
    config: StreamConfig,
    node: str,
    paths: PipelinePaths,
    notifier: Notifier,
    stop: threading.Event,
) -> dict[str, Any]:
    """Run the query only while this node holds the lease; stand by otherwise.

    In local mode a standby keeps its session ready, so taking over costs a query's
    start only. On the stream's Spark cluster a session is an application holding
    executors, and standbys would take the cores the holder needs: there a pipeline
    starts its session when it takes the lease and stops it when it loses it."""
    warm = not config.spark.master.startswith("spark://")
    spark = build_session(config, node, paths) if warm else None
    data_dir = config.data_dir_of(config.node(node))
    view = LeaseView(data_dir, node, LEASE_NAME, config.spark.lease_ms / 1000)
    keeper = _LeaseKeeper(view)
    notifier.ready(f"standing by for the {LEASE_NAME} lease, output {paths.output}")
    log.info("pipeline on %s, one for the stream: wants the %s lease", node, LEASE_NAME)
    progress: dict[str, Any] = {}
    said: str | None = None
    held: Position | None = None
    try:
        while not stop.is_set():
            lease = view.state()
            # a query starts only on a lease with a quarter term left: it stops at once
            # if the lease then runs out while the query starts (the keeper watches)
            if lease.trust_s < view.margin_s:
                line = f"standing by: the {LEASE_NAME} lease is {lease.holder or 'nobody'}'s"
                if lease.holder == node:
                    line = f"standing by: this node's {LEASE_NAME} lease ends, not renewed"
                if line != said:
                    log.info("%s", line)
                    said = line
                notifier.status(line)
                notifier.watchdog()
                held = _hold_from_checkpoint(paths, held)
                stop.wait(LEASE_POLL_S)
                continue
            log.info(
                "%s holds the %s lease: continuing from %s", node, LEASE_NAME, paths.checkpoint
            )
            said = None
            spark = spark or build_session(config, node, paths)
            if not _caught_up(paths, view, notifier, stop):
                continue
            query = start_query(spark, config, paths, once=False)
            keeper.running(query)
            try:
                progress = _run_query(
                    query, paths, notifier, stop, lambda: view.state().trust_s > 0, LEASE_POLL_S
                )
            finally:
                keeper.idle()
            if not stop.is_set():
                log.warning("%s no longer holds the %s lease: pipeline stopped", node, LEASE_NAME)
            if not warm:  # give the cluster's executors back
                spark.stop()
                spark = None
    finally:
        keeper.close()
    return progress


def checkpoint_position(checkpoint: Path, logged: bool = False) -> Position | None:
    """Where the last batch committed in Spark checkpoint ``checkpoint`` ends (with
    ``logged``: the last batch logged, committed or not); None before there is one, or
    while the checkpoint cannot be read. Spark writes ``offsets/N`` (a version line, the
    batch's metadata, then one offset per source), and ``commits/N`` once batch N is in
    the output."""
    try:
        listed = (checkpoint / ("offsets" if logged else "commits")).iterdir()
        batches = [int(p.name) for p in listed if p.name.isdigit()]
    except OSError as exc:  # none yet; or the shared storage failing (ESTALE, EIO)
        if not isinstance(exc, FileNotFoundError):
            log.warning("cannot read the checkpoint %s: %s", checkpoint, exc)
        return None
    for batch in sorted(batches, reverse=True):
        try:
            lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
            offset = json.loads(lines[2])
            return Position.parse(offset["position"])
        except (OSError, IndexError, ValueError, KeyError, TypeError):
            continue
    return None


def _caught_up(
    paths: PipelinePaths, view: LeaseView, notifier: Notifier, stop: threading.Event
) -> bool:
    """Wait until this node's merged log reaches the end of the last batch logged in the
    shared checkpoint: a holder that died after logging a batch planned it on its own
    copy, and Spark replays it with those offsets. False if the lease ran short first."""
    logged = checkpoint_position(paths.checkpoint, logged=True)
    said = False
    while logged is not None and not stop.is_set():
        local = Subscriber(paths.merged).end_position()
        if local >= logged:
            return True
        if view.state().trust_s < view.margin_s:
            return False
        if not said:
            log.info("waiting for this node's merged log to reach %s", logged.format())
            said = True
        notifier.status(f"catching up to {logged.format()} before taking over")
        notifier.watchdog()
        stop.wait(LEASE_POLL_S)
    return not stop.is_set()


def _hold_from_checkpoint(paths: PipelinePaths, held: Position | None) -> Position | None:
    """A standby holds its node's merged log from where the shared checkpoint is, so
    that the archiver keeps what it would read if it took the lease."""
    position = checkpoint_position(paths.checkpoint)
    if position is not None and position != held:
        write_hold(paths.hold, position)
        return position
    return held


def _hold_committed(query: Any, hold: Path, held: Position | None) -> Position | None:
    """Move the hold to the end of the last committed micro-batch; returns where it is.

    The source's ``commit`` does the same, but Spark calls it only when the next batch
    starts, so the hold would trail by a batch (and the last one of a run, for ever).
    Progress is reported once a batch is in the commit log.
    """
    progress = query.lastProgress or {}
    sources = progress.get("sources") or []
    end = sources[0].get("endOffset") if sources else None
    if isinstance(end, str):
        end = json.loads(end)
    if not isinstance(end, dict) or "position" not in end:
        return held
    position = Position.parse(end["position"])
    if position != held:
        write_hold(hold, position)
    return position


def _status_line(query: Any) -> str:
    progress = query.lastProgress or {}
    rows = progress.get("numInputRows", 0)
    end = (progress.get("sources") or [{}])[0].get("endOffset") or "-"
    return f"batch {progress.get('batchId', '-')}, {rows} rows, at {end}"


def _reason(failure: Any) -> str:
    """The useful line of a Spark failure: the source's own error when there is one."""
    text = str(getattr(failure, "desc", None) or failure)
    for marker in ("PositionPrunedError: ", "CorruptLogError: ", "LogError: ", "UsageError: "):
        if marker in text:
            return text[text.index(marker) :].splitlines()[0]
    return text.strip().splitlines()[0] if text.strip() else repr(failure)
