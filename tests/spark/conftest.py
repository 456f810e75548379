"""One local SparkSession for every Spark test (a JVM start costs 5-15 s on two cores)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sequencer.conftest import local_stream  # noqa: F401 (a fixture for these tests)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rt-appliance tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    import rt_appliance.spark

    rt_appliance.spark.register(session)
    yield session
    session.stop()
