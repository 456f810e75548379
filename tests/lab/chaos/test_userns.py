"""``rt chaos`` run by a user other than root moves into a user namespace of its own and
still cuts the network between nodes and fills their disks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.fault, pytest.mark.root, pytest.mark.slow]

USER = "nobody"
SEED = 4  # in 30 s with these faults: a lone-leader partition, then a full disk


def _cannot() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run a command as another user"
    if shutil.which("su") is None or shutil.which("unshare") is None:
        return "needs su and unshare"
    probe = f"{sys.executable} -c pass && unshare --user --map-root-user --net --mount true"
    done = subprocess.run(["su", USER, "-s", "/bin/sh", "-c", probe], capture_output=True)
    if done.returncode != 0:
        return f"{USER} cannot run this Python in a user namespace: {done.stderr[:200]!r}"
    return None


@pytest.fixture()
def workdir() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="rt-chaos-user-"))
    made.chmod(0o777)
    yield made / "run"
    shutil.rmtree(made, ignore_errors=True)


def test_a_run_without_root_partitions_and_fills_disks_in_a_user_namespace(
    workdir: Path,
) -> None:
    why = _cannot()
    if why:
        pytest.skip(why)
    rt = Path(sys.executable).with_name("rt")
    command = (
        f"{rt} chaos --minutes 0.5 --faults partition,disk-full,power-loss "
        f"--seed {SEED} --workdir {workdir}"
    )
    done = subprocess.run(
        ["su", USER, "-s", "/bin/sh", "-c", command], capture_output=True, text=True, timeout=280
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "going on in a user namespace of its own" in output
    assert f"PASS: seed {SEED}" in output
    report = json.loads((workdir / "report.json").read_text())
    injected = {(f["kind"], f["variant"]): f for f in report["injected"]}
    assert ("partition", "lone-leader") in injected and ("disk-full", "") in injected, injected
    assert all(not f["error"] for f in injected.values()), injected
    assert "ballast" in injected[("disk-full", "")]["did"]
    assert "power-loss" in report["unavailable"]  # loop devices are root's alone
