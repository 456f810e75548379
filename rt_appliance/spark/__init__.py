"""Spark on the stream: the ``rt`` data source and the pipeline (``rt spark-pipeline``).

The only package that imports pyspark (and the only one that needs Java). Register
the data source in a session with one line::

    import rt_appliance.spark; rt_appliance.spark.register(spark)

Importing this package also registers it in the session already running, and an
installed rt-appliance registers it in every new session by itself (the
``pyspark_rt`` module, found by PySpark's data source lookup), so
``spark.read.format("rt").load("/var/lib/rt/merged")`` then just works.

Spark runs the source in Python worker processes, started with ``PYSPARK_PYTHON``
(or ``spark.pyspark.python``), else with the first ``python3`` on ``PATH``. That one must
import rt_appliance: importing this package makes the interpreter that imports it the
default for sessions started afterwards, and :func:`register` checks the session's.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

from rt_appliance.errors import UsageError
from rt_appliance.spark.datasource import RtDataSource

__all__ = ["RtDataSource", "register", "worker_python_problem"]

log = logging.getLogger(__name__)

# Spark's own default for its Python workers when nothing names one
_SPARK_DEFAULT_PYTHON = "python3"
# how long a check that an interpreter imports rt_appliance may take
_PROBE_TIMEOUT_S = 60.0

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def register(spark: Any = None) -> None:
    """Make ``format("rt")`` known to ``spark`` (default: the active session).

    The session's Python workers must be able to import rt_appliance. If the session
    runs them with Spark's default ``python3`` and that cannot, it runs them with this
    interpreter from now on; if they were named explicitly (``PYSPARK_PYTHON``,
    ``spark.pyspark.python``) and cannot, :class:`UsageError` says what to set.
    """
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            return
    context = _context(spark)
    if context is not None:
        _check_worker_python(context)
    spark.dataSource.register(RtDataSource)


def _context(spark: Any) -> Any:
    """The session's SparkContext (None for Spark Connect, which has none here)."""
    try:
        return spark.sparkContext
    except Exception:  # pyspark raises its own error type for Connect sessions
        return None


def _check_worker_python(context: Any) -> None:
    executable = getattr(context, "pythonExec", None)
    if not isinstance(executable, str):
        return
    problem = worker_python_problem(executable)
    if problem is None:
        return
    if executable == _SPARK_DEFAULT_PYTHON:
        log.info("Spark's Python workers: %s (%s)", sys.executable, problem)
        context.pythonExec = sys.executable
        return
    raise UsageError(
        f"Spark runs its Python workers with {executable}, which {problem}; set "
        f"PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python) before the session starts"
    )


def worker_python_problem(executable: str) -> str | None:
    """Why ``executable`` cannot run the ``rt`` source in Spark's workers, or None."""
    found = shutil.which(executable)
    if found is None:
        return "is not found"
    if os.path.abspath(found) == os.path.abspath(sys.executable):
        return None
    try:
        probe = subprocess.run(
            [found, "-c", "import rt_appliance.spark.datasource"],
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot be run ({exc})"
    if probe.returncode != 0:
        lines = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"cannot import rt_appliance ({lines[-1] if lines else f'exit {probe.returncode}'})"
    return None


register()
