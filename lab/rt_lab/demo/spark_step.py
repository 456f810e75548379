"""The demo's Spark step: the pipeline on one node's merged log, then VWAP from its output.

It runs ``rt spark-pipeline --once``'s code in this process (one JVM for the pipeline
and the read-back): the node's merged log, decoded as JSON trades, becomes Parquet
partitioned by topic and date; then the example transform
(:func:`rt_appliance.spark.examples.vwap`) computes per-minute VWAP and volume over
that output, and a few rows are printed. Without Java or pyspark it says how to
install them and skips the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rt_appliance.config.model import StreamConfig
from rt_appliance.config.spark import SparkConfig
from rt_appliance.errors import UsageError

__all__ = ["TRADE_SCHEMA", "run_spark_step"]

TRADE_SCHEMA = "sym STRING, price DOUBLE, size BIGINT"
_VWAP_ROWS_SHOWN = 6

Say = Callable[[str], None]


def run_spark_step(config: StreamConfig, node: str, say: Say) -> dict[str, Any]:
    """Run the pipeline once on ``node``; what it wrote, for ``summary.json``."""
    spark_config = SparkConfig(
        enabled=True, master="local[2]", codec="json", schema_ddl=TRADE_SCHEMA, memory=1 << 30
    )
    config = config.model_copy(update={"spark": spark_config})
    try:
        from rt_appliance.spark.pipeline import paths_of, run_pipeline
    except ImportError as exc:
        say(f"   skipped: pyspark is not installed ({exc}); pip install 'rt-appliance[spark]'")
        return {"ran": False, "reason": f"pyspark missing: {exc}"}
    paths = paths_of(config, node)
    say(f"   rt spark-pipeline --node {node} --once: {paths.merged} -> {paths.output}")
    started = time.monotonic()
    try:
        progress = run_pipeline(config, node, once=True)
    except UsageError as exc:  # Java missing, most likely: say how to get it
        say(f"   skipped: {exc}")
        return {"ran": False, "reason": str(exc)}
    took = time.monotonic() - started
    from pyspark.sql import SparkSession

    from rt_appliance.spark.examples import vwap

    spark = SparkSession.getActiveSession()
    assert spark is not None
    try:
        output = spark.read.parquet(str(paths.output))
        rows = output.count()
        say(f"   {rows} rows in Parquet after {took:.1f}s (last batch {progress.get('batchId')})")
        bars = vwap(output).orderBy("minute", "topic", "sym").limit(_VWAP_ROWS_SHOWN).collect()
    finally:
        spark.stop()
    say("   per-minute VWAP (the example transform rt_appliance.spark.examples:vwap):")
    sample = []
    for bar in bars:
        say(
            f"     {bar.minute:%H:%M} {bar.topic:<7} {bar.sym:<5} vwap {bar.vwap:9.4f} "
            f"volume {bar.volume:>8} trades {bar.trades}"
        )
        sample.append(
            {
                "minute": bar.minute.isoformat(),
                "topic": bar.topic,
                "sym": bar.sym,
                "vwap": round(bar.vwap, 6),
                "volume": bar.volume,
                "trades": bar.trades,
            }
        )
    return {
        "ran": True,
        "node": node,
        "output": str(paths.output),
        "rows": rows,
        "seconds": round(took, 1),
        "vwap_sample": sample,
    }
