"""Lets PySpark find the ``rt`` data source by itself: its lookup imports every top-level
module named ``pyspark_*`` and registers the ``DefaultSource`` it exposes."""

from rt_appliance.spark.datasource import RtDataSource as DefaultSource

__all__ = ["DefaultSource"]
