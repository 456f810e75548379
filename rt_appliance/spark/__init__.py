"""Spark on the stream: the ``rt`` data source and the pipeline (``rt spark-pipeline``).

The only package that imports pyspark (and the only one that needs Java). Register
the data source in a session with one line::

    import rt_appliance.spark; rt_appliance.spark.register(spark)

Importing this package also registers it in the session already running, and an
installed rt-appliance registers it in every new session by itself (the
``pyspark_rt`` module, found by PySpark's data source lookup), so
``spark.read.format("rt").load("/var/lib/rt/merged")`` then just works.
"""

from __future__ import annotations

from typing import Any

from rt_appliance.spark.datasource import RtDataSource

__all__ = ["RtDataSource", "register"]


def register(spark: Any = None) -> None:
    """Make ``format("rt")`` known to ``spark`` (default: the active session)."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            return
    spark.dataSource.register(RtDataSource)


register()
