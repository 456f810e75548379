"""`rt demo`, `rt bench` and `rt chaos` come from rt-lab through entry points; without the
lab each says in one line what to install and exits 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from rt_appliance.cli import lab
from rt_appliance.cli.main import cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("argv", [["demo"], ["bench", "log", "--seconds", "1"], ["chaos", "-h"]])
def test_without_the_lab_a_lab_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setattr(lab, "_installed", dict)
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert f"`rt {argv[0]}` is not available" in lines[0]
    assert "pip install -e . -e ./lab" in lines[0]


def test_without_the_lab_help_still_lists_its_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab, "_installed", dict)
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ("demo", "bench", "chaos"):
        assert f"  {name} " in result.output
    assert "(needs rt-lab)" in result.output


def test_with_the_lab_installed_rt_runs_its_commands() -> None:
    """The real entry points of the installed rt-lab, through the real console script path."""
    for name in ("demo", "bench", "chaos"):
        result = subprocess.run(
            [sys.executable, "-m", "rt_appliance.cli", name, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert f"Usage: rt {name}" in result.stdout
        assert "needs rt-lab" not in result.stdout


def test_a_lab_command_that_does_not_load_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = lab.EntryPoint("demo", "rt_lab.no_such_module:demo", lab.ENTRY_POINT_GROUP)
    monkeypatch.setattr(lab, "_installed", lambda: {"demo": broken})
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 1
    assert "is installed (rt_lab.no_such_module:demo) but does not load" in result.output
