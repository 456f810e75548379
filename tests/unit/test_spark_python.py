"""Which Python Spark's workers run for the ``rt`` source: register() checks it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")

import rt_appliance.spark as rt_spark
from rt_appliance.errors import UsageError

pytestmark = pytest.mark.unit

OTHER = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if Path(p).exists()), None)
needs_other = pytest.mark.skipif(
    OTHER is None or Path(OTHER).resolve() == Path(sys.executable),
    reason="no other python3 on this machine",
)


def test_this_interpreter_serves() -> None:
    assert rt_spark.worker_python_problem(sys.executable) is None


def test_a_missing_interpreter_is_named() -> None:
    assert rt_spark.worker_python_problem("/nonexistent/python9") == "is not found"


@needs_other
def test_an_interpreter_without_rt_appliance_is_named() -> None:
    problem = rt_spark.worker_python_problem(str(OTHER))
    assert problem is not None and problem.startswith("cannot import rt_appliance (")
    assert "No module named" in problem


@needs_other
def test_spark_default_python3_is_replaced_by_this_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(Path(str(OTHER)).parent))  # python3 is the other one
    context = SimpleNamespace(pythonExec="python3")
    rt_spark._check_worker_python(context)
    assert context.pythonExec == sys.executable


@needs_other
def test_a_python_named_explicitly_is_refused_with_what_to_set() -> None:
    context = SimpleNamespace(pythonExec=str(OTHER))
    with pytest.raises(UsageError, match=f"set PYSPARK_PYTHON={sys.executable}"):
        rt_spark._check_worker_python(context)
    assert context.pythonExec == OTHER  # the user's choice is not changed behind their back
