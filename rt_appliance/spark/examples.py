"""Example transforms for ``spark.transform`` (``module:function``, DataFrame in and out).

:func:`vwap`: per symbol and minute, the volume-weighted average price and the
volume of trades whose payload is JSON such as ``{"sym": "ABC", "price": 10.5,
"size": 300}`` (read with ``codec: json`` and ``schema: sym STRING, price DOUBLE,
size BIGINT``). Trades are placed in minutes by their publish timestamp. In a
stream a minute is written once the watermark (the newest timestamp seen, less
``VWAP_LATENESS``) has passed its end, so every row is final; the minute still
open when a run stops is written by a later run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VWAP_LATENESS", "vwap"]

VWAP_LATENESS = "10 seconds"  # how late a trade may arrive and still count in its minute


def vwap(trades: Any) -> Any:
    """Per-minute VWAP and volume per topic and symbol, with a ``date`` to partition by."""
    from pyspark.sql import functions as F

    minute = F.window("timestamp", "1 minute")
    return (
        trades.withWatermark("timestamp", VWAP_LATENESS)
        .groupBy("topic", "sym", minute)
        .agg(
            (F.sum(F.col("price") * F.col("size")) / F.sum("size")).alias("vwap"),
            F.sum("size").alias("volume"),
            F.count(F.lit(1)).alias("trades"),
        )
        .select(
            "topic",
            "sym",
            F.col("window.start").alias("minute"),
            "vwap",
            "volume",
            "trades",
            F.to_date(F.col("window.start")).alias("date"),
        )
    )
