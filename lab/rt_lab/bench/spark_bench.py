"""``rt bench spark``: the ``rt`` Spark data source on this machine.

Three measurements in one local Spark session (``local[2]``), 100-byte payloads:

* **batch read**: a publisher log read with ``spark.read.format("rt")`` into the
  ``noop`` sink, side by side with the same rows in Parquet read by Spark's own
  reader; with the stages around it timed on their own (planning on the driver, the
  slice reader without Spark, and Spark reading pre-built Arrow batches from a Python
  source, the most any Python source can reach); and the same read of the same log
  through a standalone cluster on this machine (``cluster_workers`` workers of one
  core, secured as the stream's cluster: :mod:`rt_lab.bench.spark_cluster`), run by
  run after the local one;
* **streaming lag**: messages published at a steady rate while a micro-batch query
  writes them to Parquet; each row's lag is the time its micro-batch was committed
  (the mtime of ``checkpoint/commits/N``) minus its publish timestamp;
* **pipeline memory**: the RSS of the driver's JVM and of the Python workers (from
  ``/proc``) sampled every second while a streaming query reads a large backlog.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from rt_appliance.errors import RTError
from rt_appliance.limits import SPARK_BATCH_ROWS
from rt_appliance.publish import Publisher
from rt_appliance.spark.codecs import PayloadCodec
from rt_appliance.spark.options import RAW_DDL
from rt_appliance.spark.plan import earliest, plan
from rt_appliance.spark.read import read_slice
from rt_lab.bench.spark_cluster import ADDRESS as CLUSTER_ADDRESS
from rt_lab.bench.spark_cluster import WORKER_CORES, ClusterReader, StandaloneCluster
from rt_lab.bench.stats import Result, percentile

__all__ = ["SparkBenchOptions", "SparkBenchReport", "run_spark_bench"]

TOPIC, HOST = "bench", "bench-host"
PAYLOAD_BYTES = 100
ROLL_BYTES = 256 << 20
BATCH_TARGET_ROWS_S = 1_500_000
BATCH_TARGET_RATIO = 0.5
MAX_BYTES_PER_TRIGGER = "64MiB"  # the pipeline's default (spark.max_bytes_per_trigger)
_LAG_WARMUP = 1000  # messages published (and committed) before the timed stream starts
SYNTHETIC = "rt_bench_synthetic"


@dataclass(slots=True)
class SparkBenchOptions:
    workdir: Path
    rows: int = 2_000_000
    runs: int = 3
    lag_seconds: float = 30.0
    rate: int = 5_000
    memory_rows: int = 10_000_000
    memory_rate: int = 50_000  # msg/s published while memory is sampled; 0: ahead
    memory_bound_mb: float = 64.0
    master: str = "local[2]"
    cluster_workers: int = 3  # standalone workers the batch read also runs on; 0: none


@dataclass(slots=True)
class SparkBenchReport:
    results: list[Result] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)  # 1-minute load average per section
    verdicts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    versions: str = ""


# -- data --------------------------------------------------------------------------------


def _publish(root: Path, topic: str, rows: int, first_id: int = 1) -> Path:
    """``rows`` messages of random 100-byte payloads (ids from ``first_id``) in batches of
    1,000, as fast as the publisher can; returns the stream directory."""
    with Publisher(root, topic, HOST, fsync="never", roll_bytes=ROLL_BYTES) as pub:
        done = 0
        while done < rows:
            count = min(1000, rows - done)
            pub.publish_batch(_payloads(count), ids=range(first_id + done, first_id + done + count))
            done += count
        pub.flush()
        return pub.directory


def _payloads(count: int) -> list[bytes]:
    """Distinct, incompressible payloads: Parquet gets no help from repeated values."""
    block = os.urandom(PAYLOAD_BYTES * count)
    return [block[i : i + PAYLOAD_BYTES] for i in range(0, len(block), PAYLOAD_BYTES)]


# -- the session -------------------------------------------------------------------------


def session_builder(builder: Any, scratch: Path) -> Any:
    """``builder`` (a ``SparkSession.Builder``) with what every session of the bench runs
    with: this Python for the workers, scratch files under ``scratch``, no web UI."""
    return (
        builder.config("spark.pyspark.python", sys.executable)
        .config("spark.local.dir", str(scratch))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
    )


def ready_session(spark: Any) -> Any:
    """``spark`` quiet, with the ``rt`` source and the synthetic one registered."""
    spark.sparkContext.setLogLevel("ERROR")
    import rt_appliance.spark

    rt_appliance.spark.register(spark)
    spark.dataSource.register(SyntheticSource)
    return spark


def _session(opts: SparkBenchOptions, scratch: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(opts.master).appName("rt bench spark")
    return ready_session(session_builder(builder, scratch).getOrCreate())


def noop_seconds(frame: Any) -> float:
    """Seconds to read every row of ``frame`` into the ``noop`` sink."""
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


# -- a Python source that only hands over batches built in advance -----------------------


_PREBUILT: dict[int, pa.RecordBatch] = {}


def _prebuilt(rows: int, schema: pa.Schema) -> pa.RecordBatch:
    """One batch of ``rows`` rows of the raw schema, built once per worker process."""
    batch = _PREBUILT.get(rows)
    if batch is None:
        data = os.urandom(rows * PAYLOAD_BYTES)
        offsets = np.arange(0, rows * PAYLOAD_BYTES + 1, PAYLOAD_BYTES, dtype=np.int32)
        ids = np.arange(1, rows + 1, dtype=np.int64)
        columns = [
            pa.array(ids * 128, pa.int64()),
            pa.array([TOPIC] * rows, pa.string()),
            pa.array([HOST] * rows, pa.string()),
            pa.array(np.full(rows, 1_700_000_000_000_000, np.int64), schema.field(3).type),
            pa.array(ids, pa.int64()),
            pa.Array.from_buffers(
                pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            ),
        ]
        batch = _PREBUILT[rows] = pa.RecordBatch.from_arrays(columns, schema=schema)
    return batch


class _Count(InputPartition):
    def __init__(self, rows: int) -> None:
        super().__init__(rows)
        self.rows = rows


class SyntheticSource(DataSource):
    """``format("rt_bench_synthetic")``: option ``rows`` rows in option ``partitions``
    partitions, of the ``rt`` raw schema, from record batches built in advance."""

    @classmethod
    def name(cls) -> str:
        return SYNTHETIC

    def schema(self) -> str:
        return RAW_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SyntheticReader(schema, int(self.options["rows"]), int(self.options["partitions"]))


class _SyntheticReader(DataSourceReader):
    def __init__(self, schema: StructType, rows: int, partitions: int) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.rows, self.count = rows, partitions

    def partitions(self) -> list[_Count]:
        share, extra = divmod(self.rows, self.count)
        return [_Count(share + (1 if i < extra else 0)) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Count)
        batch = _prebuilt(SPARK_BATCH_ROWS, self.arrow_schema)
        left = partition.rows
        while left > 0:
            take = min(left, SPARK_BATCH_ROWS)
            yield batch if take == SPARK_BATCH_ROWS else batch.slice(0, take)
            left -= take


# -- 1. batch read -----------------------------------------------------------------------


def _raw_codec() -> PayloadCodec:
    from pyspark.sql.pandas.types import to_arrow_schema

    return PayloadCodec("raw", to_arrow_schema(_raw_struct(), timezone="UTC"))


def _raw_struct() -> StructType:
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        StringType,
        StructField,
        TimestampType,
    )

    return StructType(
        [
            StructField("position", LongType(), False),
            StructField("topic", StringType(), False),
            StructField("host", StringType(), False),
            StructField("timestamp", TimestampType(), False),
            StructField("id", LongType(), False),
            StructField("payload", BinaryType(), False),
        ]
    )


def _python_read(directory: Path, codec: PayloadCodec) -> tuple[float, float, int, int]:
    """Planning and then every slice read in this process, no Spark:
    ``(plan seconds, read seconds, rows, slices)``."""
    start = time.perf_counter()
    planned = plan(directory, earliest(directory))
    planned_at = time.perf_counter()
    rows = 0
    for piece in planned.slices:
        for batch in read_slice(directory, piece.start, piece.end, None, codec):
            rows += batch.num_rows
    return planned_at - start, time.perf_counter() - planned_at, rows, len(planned.slices)


def _batch_read(
    spark: Any, opts: SparkBenchOptions, root: Path, progress: Callable[[str], None]
) -> list[Result]:
    rows = opts.rows
    progress(f"batch read: publishing {rows:,} messages")
    directory = _publish(root / "log", TOPIC, rows)
    parquet = root / "parquet"
    spark.read.format("rt").load(str(directory)).write.parquet(str(parquet))
    codec = _raw_codec()
    slices = len(plan(directory, earliest(directory)).slices)

    def rt() -> Any:
        return spark.read.format("rt").load(str(directory))

    def parquet_frame() -> Any:
        return spark.read.parquet(str(parquet))

    def synthetic() -> Any:
        return (
            spark.read.format(SYNTHETIC)
            .option("rows", str(rows))
            .option("partitions", str(slices))
            .load()
        )

    progress("batch read: warming up")
    for name, frame in (("rt", rt), ("parquet", parquet_frame), ("synthetic", synthetic)):
        found = frame().count()
        if found != rows:
            raise RTError(f"the {name} read gave {found:,} rows, not {rows:,}")
        noop_seconds(frame())
    _python_read(directory, codec)
    tiny = spark.read.format("rt").option("endingPosition", str(_first_end(directory)))
    noop_seconds(tiny.load(str(directory)))

    results = {
        "rt": Result(
            "batch read, spark.read.format('rt') -> noop",
            "rows/s",
            f">= {BATCH_TARGET_ROWS_S:,}",
            note=f"{rows:,} rows, {slices} partitions",
        ),
        "parquet": Result(
            "batch read, the same rows from Parquet (Spark's reader) -> noop",
            "rows/s",
            "-",
            note="written once by Spark from the rt read (snappy)",
        ),
        "ratio": Result(
            "rt read rate / Parquet read rate", "%", f">= {BATCH_TARGET_RATIO:.0%}", note=""
        ),
    }
    more = {
        "synthetic": Result(
            "batch read, Python source yielding pre-built Arrow batches -> noop",
            "rows/s",
            "-",
            note=f"same schema, {SPARK_BATCH_ROWS:,}-row batches, {slices} partitions: "
            "Spark's ceiling for a Python source",
        ),
        "python": Result(
            "slice reader alone (read_slice over the plan, one thread, no Spark)",
            "rows/s",
            "-",
            note="CRC walk, columns and Arrow batches",
        ),
        "plan": Result("planning on the driver (plan(): walk with CRC checks)", "s", "-", note=""),
        "tiny": Result(
            "one-record rt query -> noop (fixed cost per query)",
            "s",
            "-",
            note="endingPosition after the first record",
        ),
    }
    with contextlib.ExitStack() as stack:
        cluster = None
        if opts.cluster_workers > 0:
            cluster = _cluster_reader(stack, opts, root / "cluster", directory, progress)
            results |= _cluster_results(opts, cluster)
        results |= more
        for run in range(1, opts.runs + 1):
            progress(f"batch read: run {run}/{opts.runs}")
            rt_s = noop_seconds(rt())
            if cluster is not None:
                cluster_s = cluster.read()
                results["cluster"].values.append(rows / cluster_s)
                results["cluster ratio"].values.append(100 * rt_s / cluster_s)
            parquet_s = noop_seconds(parquet_frame())
            synthetic_s = noop_seconds(synthetic())
            plan_s, read_s, found, _ = _python_read(directory, codec)
            tiny_s = noop_seconds(tiny.load(str(directory)))
            results["rt"].values.append(rows / rt_s)
            results["parquet"].values.append(rows / parquet_s)
            results["ratio"].values.append(100 * parquet_s / rt_s)
            results["synthetic"].values.append(rows / synthetic_s)
            results["python"].values.append(found / read_s)
            results["plan"].values.append(plan_s)
            results["tiny"].values.append(tiny_s)
    return list(results.values())


def _cluster_reader(
    stack: contextlib.ExitStack[Any],
    opts: SparkBenchOptions,
    root: Path,
    directory: Path,
    progress: Callable[[str], None],
) -> ClusterReader:
    """A driver on a standalone cluster of ``opts.cluster_workers`` workers on this
    machine, warmed up on ``directory``; the cluster stops when ``stack`` closes."""
    cluster = stack.enter_context(StandaloneCluster(root, opts.cluster_workers, progress))
    progress("batch read: a driver on the cluster, warming up")
    return cluster.driver(directory, opts.rows)


def _cluster_results(opts: SparkBenchOptions, cluster: ClusterReader) -> dict[str, Result]:
    workers = opts.cluster_workers
    on = f"{workers} workers of {WORKER_CORES} core"
    return {
        "cluster": Result(
            f"batch read through a standalone cluster ({on}), format('rt') -> noop",
            "rows/s",
            "-",
            note=f"{cluster.rows:,} rows counted, {cluster.partitions} partitions, "
            f"{cluster.executors} executors asking for rtlog, on {CLUSTER_ADDRESS}; "
            "authenticated and encrypted",
        ),
        "cluster ratio": Result(
            "cluster read rate / local read rate",
            "%",
            "-",
            note=f"{on} against {opts.master}, run by run",
        ),
    }


def _end_of(directory: Path) -> int:
    """The position after the last record of ``directory`` now."""
    return int(plan(directory, earliest(directory)).end)


def _first_end(directory: Path) -> int:
    """The position right after the first record of ``directory``."""
    return int(plan(directory, earliest(directory), max_records=1).end)


# -- 2. streaming lag --------------------------------------------------------------------


@dataclass(slots=True)
class _Stream:
    """A streaming query from a stream directory to a Parquet sink."""

    query: Any
    output: Path
    checkpoint: Path

    def committed_position(self) -> int:
        progress = self.query.lastProgress or {}
        sources = progress.get("sources") or []
        end = sources[0].get("endOffset") if sources else None
        if isinstance(end, str):
            end = json.loads(end)
        return int(end["position"]) if isinstance(end, dict) else 0

    def wait_for(self, position: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.committed_position() < position:
            if not self.query.isActive:
                raise RTError(f"the streaming query stopped: {self.query.exception()}")
            if time.monotonic() > deadline:
                raise RTError(
                    f"the streaming query had not committed position {position} after "
                    f"{timeout_s:.0f} s (at {self.committed_position()})"
                )
            time.sleep(0.05)


def _start_stream(spark: Any, directory: Path, root: Path, max_bytes: str | None) -> _Stream:
    reader = spark.readStream.format("rt")
    if max_bytes is not None:
        reader = reader.option("maxBytesPerTrigger", max_bytes)
    output, checkpoint = root / "output", root / "checkpoint"
    query = (
        reader.load(str(directory))
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .trigger(processingTime="1 second")
        .start()
    )
    return _Stream(query, output, checkpoint)


def _paced(pub: Publisher, total: int, rate: int, first_id: int) -> int:
    """Publish ``total`` messages at ``rate`` msg/s in 1 ms ticks (each message timestamped
    when its batch is published, ids from ``first_id``); returns how many were published."""
    sent = 0
    start = time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate))
        if due > sent:
            for at in range(sent, due, 1000):
                upto = min(due, at + 1000)
                pub.publish_batch(_payloads(upto - at), ids=range(first_id + at, first_id + upto))
            sent = due
        next_tick = start + (int((time.monotonic() - start) * 1000) + 1) / 1000
        time.sleep(max(0.0, next_tick - time.monotonic()))
    return sent


def _batches(checkpoint: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every committed micro-batch as (end position, commit time ns), in batch order."""
    ends, commits = [], []
    numbered = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    for commit in sorted(numbered, key=lambda p: int(p.name)):
        offsets = (checkpoint / "offsets" / commit.name).read_text().strip().splitlines()
        ends.append(int(json.loads(offsets[-1])["position"]))
        commits.append(commit.stat().st_mtime_ns)
    return np.array(ends, np.int64), np.array(commits, np.int64)


def _streaming_lag(
    spark: Any, opts: SparkBenchOptions, root: Path, progress: Callable[[str], None]
) -> tuple[list[Result], list[str]]:
    pub_root = root / "pub"
    problems: list[str] = []
    with Publisher(pub_root, "lag", HOST, fsync="never", roll_bytes=ROLL_BYTES) as pub:
        pub.publish_batch(_payloads(_LAG_WARMUP), ids=range(1, _LAG_WARMUP + 1))
        stream = _start_stream(spark, pub.directory, root, None)
        try:
            stream.wait_for(int(pub.position), 120)
            progress(f"streaming lag: publishing {opts.rate:,} msg/s for {opts.lag_seconds:g} s")
            sent = _paced(pub, int(opts.lag_seconds * opts.rate), opts.rate, _LAG_WARMUP + 1)
            stream.wait_for(int(pub.position), 120)
            durations_ms = [
                p["durationMs"]["triggerExecution"]
                for p in stream.query.recentProgress
                if p.get("numInputRows") and "triggerExecution" in p.get("durationMs", {})
            ]
        finally:
            stream.query.stop()
    total = _LAG_WARMUP + sent
    table = pq.read_table(stream.output, columns=["position", "timestamp", "id"])
    ids = table.column("id").to_numpy()
    unique = len(np.unique(ids))
    if len(ids) != total or unique != total or ids.min() != 1 or ids.max() != total:
        problems.append(
            f"streaming lag: the sink holds {len(ids):,} rows ({unique:,} distinct ids, "
            f"{ids.min()}..{ids.max()}), {total:,} were published"
        )
    ends, commit_ns = _batches(stream.checkpoint)
    positions = table.column("position").to_numpy()
    # Spark writes INT96 timestamps by default, which pyarrow reads as nanoseconds
    stamps = table.column("timestamp").cast(pa.timestamp("ns", tz="UTC"))
    stamps_ns = stamps.cast(pa.int64()).to_numpy()
    batch = np.searchsorted(ends, positions, "left")  # a row's position is the end of it
    timed = ids > _LAG_WARMUP
    lags_ms = (commit_ns[batch[timed]] - stamps_ns[timed]) / 1e6
    batches = len(np.unique(batch[timed]))
    took = [percentile(durations_ms, q) for q in (50, 99)] if durations_ms else [0.0, 0.0]
    note = (
        f"{sent:,} messages at {opts.rate:,} msg/s for {opts.lag_seconds:g} s in "
        f"{batches} micro-batches; trigger 1 s; a micro-batch took {took[0]:.0f} ms "
        f"p50, {took[1]:.0f} ms p99"
    )
    lost = "none lost or duplicated" if not problems else "ROWS LOST OR DUPLICATED"
    p50, p99 = (percentile(lags_ms.tolist(), q) for q in (50, 99))
    return [
        Result("streaming lag p50, publish -> micro-batch committed", "ms", "-", [p50], note),
        Result("streaming lag p99, publish -> micro-batch committed", "ms", "-", [p99], note),
        Result(
            "streaming rows in the Parquet sink / published",
            "rows",
            "= published",
            [float(len(ids))],
            f"{total:,} published, {unique:,} distinct ids: {lost}",
        ),
    ], problems


# -- 3. pipeline memory ------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry))
    return tree


def _descendants(pid: int, tree: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(tree.get(child, []))
    return found


def _rss_and_name(pid: int) -> tuple[int, str]:
    rss, name = 0, ""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:  # it may have exited
        for line in f:
            if line.startswith("Name:"):
                name = line.split()[1]
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, name


def sample_tree(root_pid: int) -> tuple[int, int, int]:
    """``(JVM RSS, Python workers' RSS summed, Python worker count)`` below ``root_pid``:
    the JVM Spark runs in and every Python process started under it."""
    tree = _children()
    jvm_rss = python_rss = workers = 0
    for pid in _descendants(root_pid, tree):
        rss, name = _rss_and_name(pid)
        if name == "java":
            jvm_rss += rss
        elif name.startswith("python"):
            python_rss += rss
            workers += 1
    return jvm_rss, python_rss, workers


@dataclass(slots=True)
class _Sample:
    at: float
    position: int
    jvm: int
    python: int
    workers: int


def _pipeline_memory(
    spark: Any, opts: SparkBenchOptions, root: Path, progress: Callable[[str], None]
) -> list[Result]:
    """RSS while a query streams ``memory_rows`` messages to Parquet: published while it
    runs at ``memory_rate`` msg/s (0: all published before it starts)."""
    rows, rate = opts.memory_rows, opts.memory_rate
    warmup = min(rows, _LAG_WARMUP)
    if rate:
        directory = _publish(root / "pub", "memory", warmup)
    else:
        progress(f"pipeline memory: publishing {rows:,} messages ahead")
        directory = _publish(root / "pub", "memory", rows)
    samples: list[_Sample] = []
    done = threading.Event()
    stream = _start_stream(spark, directory, root, MAX_BYTES_PER_TRIGGER)

    def sample() -> None:
        while not done.is_set():
            jvm, python, workers = sample_tree(os.getpid())
            samples.append(
                _Sample(time.monotonic(), stream.committed_position(), jvm, python, workers)
            )
            done.wait(1.0)

    sampler = threading.Thread(target=sample, name="rt-bench-rss", daemon=True)
    how = f"at {rate:,} msg/s" if rate else "from a backlog"
    progress(f"pipeline memory: streaming {rows:,} messages {how} to Parquet, RSS every second")
    started = time.monotonic()
    sampler.start()
    try:
        if rate:
            stream.wait_for(int(_end_of(directory)), 120)  # the warm-up batch
            started = time.monotonic()
            with Publisher(
                root / "pub", "memory", HOST, fsync="never", roll_bytes=ROLL_BYTES
            ) as pub:
                _paced(pub, rows - warmup, rate, warmup + 1)
        stream.wait_for(int(_end_of(directory)), max(600.0, rows / 5_000))
    finally:
        done.set()
        sampler.join()
        stream.query.stop()
    found = pq.read_table(stream.output, columns=["id"]).num_rows
    if found != rows:
        raise RTError(f"pipeline memory: the sink holds {found:,} rows, {rows:,} were published")
    elapsed = time.monotonic() - started
    warm = [s for s in samples if s.position > 0] or samples
    last = warm[-1]
    note_rate = f"{rows:,} messages {how} in {elapsed:.0f} s, "
    note_rate += f"maxBytesPerTrigger {MAX_BYTES_PER_TRIGGER}, {len(warm)} samples"
    results = [
        Result(
            "streaming rate while memory was sampled, -> Parquet",
            "msg/s",
            "-",
            [rows / elapsed],
            note_rate,
        )
    ]
    for label, attr in (("driver JVM", "jvm"), ("Python workers (summed)", "python")):
        values = [getattr(s, attr) for s in warm]
        start_v, end_v, peak = values[0], values[-1], max(values)
        half = values[len(values) // 2 :]
        quarters = "/".join(f"{values[len(values) * q // 4] / 1e6:.0f}" for q in (1, 2, 3))
        results.append(
            Result(
                f"{label} RSS growth over the second half of {rows:,} messages",
                "MB",
                f"flat (<= {opts.memory_bound_mb:g})",
                [(max(half) - half[0]) / 1e6],
                f"start {start_v / 1e6:.0f} MB (after the first micro-batch), "
                f"{quarters} MB at 1/4, 1/2, 3/4 of the run, end {end_v / 1e6:.0f} MB, "
                f"peak {peak / 1e6:.0f} MB: {(end_v - start_v) / 1e6:+.0f} MB start to end"
                + (f"; {last.workers} processes at the end" if attr == "python" else ""),
            )
        )
    return results


def _memory_in_child(opts: SparkBenchOptions, root: Path) -> list[Result]:
    """:func:`_pipeline_memory` in a process (and a Spark session) of its own."""
    root.mkdir(parents=True)
    settings = {
        "rows": opts.memory_rows,
        "rate": opts.memory_rate,
        "bound": opts.memory_bound_mb,
        "master": opts.master,
    }
    done = subprocess.run(
        [sys.executable, "-m", "rt_lab.bench.spark_bench", str(root), json.dumps(settings)],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RTError(f"pipeline memory: the measuring process failed ({done.returncode})")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return [Result(r["name"], r["unit"], r["target"], r["runs"], r["note"]) for r in found]


def _memory_main(root: Path, settings: dict[str, Any]) -> None:
    opts = SparkBenchOptions(
        workdir=root,
        memory_rows=settings["rows"],
        memory_rate=settings["rate"],
        memory_bound_mb=settings["bound"],
        master=settings["master"],
    )

    def progress(message: str) -> None:
        print(f"rt bench spark: {message}", file=sys.stderr, flush=True)

    progress("pipeline memory: starting a Spark session of its own")
    spark = _session(opts, root / "scratch")
    try:
        results = _pipeline_memory(spark, opts, root, progress)
    finally:
        spark.stop()
    print(json.dumps([r.as_dict() for r in results]))


# -- the whole benchmark -----------------------------------------------------------------


def _load() -> float:
    return os.getloadavg()[0]


def verdicts(results: list[Result], bound_mb: float) -> list[str]:
    """One line per figure with a target: met or not."""
    lines = []
    for r in results:
        if not r.values:
            continue
        if r.target.startswith(">= ") and r.unit in ("rows/s", "%"):
            goal = float(r.target[3:].rstrip("%").replace(",", ""))
            met = r.median >= goal
        elif r.target.startswith("flat"):
            met = r.median <= bound_mb
        elif r.target == "= published":
            met = "none lost" in r.note
        else:
            continue
        lines.append(
            f"- {r.name}: {r.median:,.1f} {r.unit}, target {r.target}: "
            f"**{'met' if met else 'not met'}**"
        )
    return lines


def run_spark_bench(opts: SparkBenchOptions, progress: Callable[[str], None]) -> SparkBenchReport:
    """Every Spark measurement in one session; temporary files under ``opts.workdir``."""
    import pyspark

    versions = f"pyspark {pyspark.__version__}, pyarrow {pa.__version__}, {opts.master}"
    if opts.cluster_workers > 0:
        versions += f" and a standalone cluster of {opts.cluster_workers} workers"
    report = SparkBenchReport(versions=versions)
    tmp = Path(tempfile.mkdtemp(prefix="rt-bench-spark-", dir=opts.workdir))
    try:
        progress("starting a local Spark session")
        spark = _session(opts, tmp / "scratch")
        try:
            report.loads.append(_load())
            report.results.extend(_batch_read(spark, opts, tmp / "batch", progress))
            shutil.rmtree(tmp / "batch", ignore_errors=True)
            if opts.lag_seconds > 0:
                report.loads.append(_load())
                lag, problems = _streaming_lag(spark, opts, tmp / "lag", progress)
                report.results.extend(lag)
                report.problems.extend(problems)
                shutil.rmtree(tmp / "lag", ignore_errors=True)
            report.loads.append(_load())
        finally:
            spark.stop()
        if opts.memory_rows > 0:  # a fresh JVM, not one the reads above have grown
            report.results.extend(_memory_in_child(opts, tmp / "memory"))
            report.loads.append(_load())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.verdicts = verdicts(report.results, opts.memory_bound_mb)
    return report


if __name__ == "__main__":
    _memory_main(Path(sys.argv[1]), json.loads(sys.argv[2]))
