"""``format("rt")`` is found in a new session of a fresh process: with no line at all in
the editable install ``make`` sets up and in a wheel install, and with ``register(spark)``
when the application's Python is not the first ``python3`` on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.spark.test_source import publisher_log

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MESSAGES = 3 * 400  # publisher_log's default

# a job as a user writes it: a new session, then read; "--register" adds the one line
JOB = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .getOrCreate())
if "--register" in sys.argv:
    import rt_appliance.spark
    rt_appliance.spark.register(spark)
print("COUNT", spark.read.format("rt").load(sys.argv[1]).count(), flush=True)
spark.stop()
"""


def run_job(
    python: Path | str, tmp_path: Path, path_dirs: list[str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run the job in a fresh process with PATH made of ``path_dirs`` and no
    PYSPARK_PYTHON, as a user's shell would (JAVA_HOME and the rest kept)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    data = publisher_log(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHON"))}
    env["PATH"] = os.pathsep.join(path_dirs)
    return subprocess.run(
        [str(python), str(job), str(data), *args],
        env=env,
        cwd=tmp_path,  # not the repository: nothing found by the working directory
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def counted(result: subprocess.CompletedProcess[str]) -> int:
    for line in result.stdout.splitlines():
        if line.startswith("COUNT "):
            return int(line.split()[1])
    raise AssertionError(f"the job printed no count (exit {result.returncode}):\n{result.stderr}")


def system_dirs() -> list[str]:
    """PATH without this environment's bin: its python3 is not this interpreter."""
    ours = str(Path(sys.executable).parent)
    return [d for d in ("/usr/local/bin", "/usr/bin", "/bin") if d != ours]


def test_the_editable_install_is_found_with_no_line(tmp_path: Path) -> None:
    venv_bin = str(Path(sys.executable).parent)  # as with the environment activated
    result = run_job(sys.executable, tmp_path, [venv_bin, *system_dirs()])
    assert counted(result) == MESSAGES


def test_register_works_when_python3_on_path_is_another_python(tmp_path: Path) -> None:
    result = run_job(sys.executable, tmp_path, system_dirs(), "--register")
    assert counted(result) == MESSAGES
    # without the line, Spark's workers run the other python3 and the read fails
    bare = run_job(sys.executable, tmp_path / "bare", system_dirs())
    assert bare.returncode != 0 and "COUNT" not in bare.stdout


def test_register_names_what_to_set_when_the_named_python_cannot_import_it(
    tmp_path: Path,
) -> None:
    other = next(
        (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if Path(p).exists()), None
    )
    if other is None:
        pytest.skip("no other python3 on this machine")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    data = publisher_log(tmp_path / "data")
    env = {**os.environ, "PYSPARK_PYTHON": other}
    result = subprocess.run(
        [sys.executable, str(job), str(data), "--register"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode != 0
    assert f"Spark runs its Python workers with {other}, which cannot import" in result.stderr
    assert f"set PYSPARK_PYTHON={sys.executable}" in result.stderr


def test_a_wheel_install_is_found_with_no_line(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("rt_appliance-*.whl")
    venv = tmp_path / "venv"
    # no pip of its own (ensurepip is the slow part of making one): this environment's
    # pip installs into it (--python)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    # the dependencies (pyspark and the rest) from this environment, without its own
    # rt_appliance: a path entry adds the directory, not its .pth files (the editable hook)
    site = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = venv / "bin" / "python"
    install = ["install", "--quiet", "--no-deps", str(wheel)]
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *install],
        check=True,
        capture_output=True,
        timeout=300,
    )
    where = subprocess.run(
        [str(python), "-c", "import rt_appliance, pyspark_rt; print(rt_appliance.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(venv)), where  # the wheel's, not the repository's
    result = run_job(python, tmp_path, [str(venv / "bin"), *system_dirs()])
    assert counted(result) == MESSAGES
