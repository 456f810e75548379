"""The rendered units: the golden files in systemd/, and what systemd itself says of them.

`systemd-analyze verify` must print nothing at all (it warns on stderr with exit 0
for many mistakes), and `systemd-analyze security --offline` must rate every unit
at or below THRESHOLD (exposure x 10; docs/OPERATIONS.md lists each unit's score).
The Spark units (JVMs) are held to the same gate: they lack only MemoryDenyWriteExecute=
and ProcSubset=pid and score 1.3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rt_appliance.appliance.golden import GOLDEN_DIRS, golden_units
from rt_appliance.appliance.render import unit_files
from rt_appliance.config import load_config, parse_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "etc" / "rt.yaml"
THRESHOLD = 20  # exposure 2.0 ("OK"); the units score 1.2 with systemd 252
SYSTEM_UNITS = Path("/usr/lib/systemd/system")

needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir(),
    reason="systemd-analyze and systemd's units are not installed (Debian package systemd)",
)


def test_golden_units_match_what_apply_renders() -> None:
    rendered = golden_units(EXAMPLE)
    kept = {p.relative_to(ROOT / "systemd") for p in (ROOT / "systemd").rglob("*.service")}
    assert kept == set(rendered), "systemd/ is stale: run `make units`"
    for relative, text in rendered.items():
        assert (ROOT / "systemd" / relative).read_text() == text, f"{relative}: run `make units`"
    assert {p.parts[0] for p in rendered} == set(GOLDEN_DIRS)


def test_each_role_gets_its_units_and_settings() -> None:
    config = load_config(EXAMPLE)
    assert list(unit_files(config, "rt-1")) == [
        "rt-sequencer.service",  # the node as one process: rt node
        "rt-spark-pipeline.service",  # the example enables spark, not its worker
    ]
    assert list(unit_files(config, "pub-2")) == ["rt-push-client.service"]
    assert list(unit_files(config, "sub-1")) == ["rt-pull-client.service"]
    sequencer = unit_files(config, "rt-2")["rt-sequencer.service"]
    for line in (
        "Type=notify",
        "NotifyAccess=main",
        "WatchdogSec=10s",
        "Restart=on-failure",
        "User=rt",
        "Group=rt",
        "StateDirectory=rt",
        "MemoryMax=2147483648",
        "CPUWeight=300",
        "CPUSchedulingPolicy=batch",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "ExecStart=/opt/rt-appliance/bin/rt --log-level info node "
        "--config /etc/rt/rt.yaml --node rt-2",
        "After=network-online.target",
    ):
        assert line in sequencer.splitlines(), line


def test_settings_follow_the_config() -> None:
    text = EXAMPLE.read_text().replace("prefix: /opt/rt-appliance", "prefix: /usr/local/rt")
    text = text.replace("data_dir: /var/lib/rt", "data_dir: /srv/rt/{name}")
    text = text.replace("      memory_max: 512MiB\n", "", 1)  # push_client: no limit
    config = parse_config(text)
    unit = unit_files(config, "pub-1")["rt-push-client.service"].splitlines()
    exec_start = (
        "ExecStart=/usr/local/rt/bin/rt --log-level info push-client "
        "--config /etc/rt/rt.yaml --host pub-1"
    )
    assert exec_start in unit
    assert "ReadWritePaths=/srv/rt/pub-1" in unit and "MemoryMax=infinity" in unit
    assert not any(line.startswith("StateDirectory=") for line in unit)
    assert "UMask=0007" in unit  # applications in group rt write pub/


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root tree with systemd's own units, the units of the example, and programs to run."""
    root = tmp_path_factory.mktemp("stage")
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    for program in ("opt/rt-appliance/bin/rt", "opt/rt-appliance/spark/pyspark/bin/spark-class"):
        (root / program).parent.mkdir(parents=True)
        (root / program).write_text("#!/bin/sh\n")
        (root / program).chmod(0o755)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for relative, text in golden_units(EXAMPLE).items():
        (unit_dir / relative.name).write_text(text)
    return root


UNITS = sorted({p.name for p in golden_units(EXAMPLE)})


@needs_analyze
@pytest.mark.parametrize("unit", UNITS)
def test_systemd_analyze_verify_prints_nothing(staged: Path, unit: str) -> None:
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={staged}", unit],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result


@needs_analyze
@pytest.mark.parametrize("unit", UNITS)
def test_systemd_analyze_security_passes_threshold(staged: Path, unit: str) -> None:
    base = ["systemd-analyze", "security", "--offline=true", f"--root={staged}"]
    result = subprocess.run(
        [*base, f"--threshold={THRESHOLD}", unit], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Overall exposure level" in result.stdout
    checks = subprocess.run(
        [*base, "--json=short", unit], capture_output=True, text=True, timeout=60, check=True
    )
    by_name = {c["name"]: c for c in json.loads(checks.stdout)}
    for name in ("NoNewPrivileges=", "ProtectSystem=", "RestrictAddressFamilies=~AF_PACKET"):
        assert by_name[name]["set"] is True, by_name[name]
