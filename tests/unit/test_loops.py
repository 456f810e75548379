"""Which event loop the daemons and in-process clients run on: RT_EVENT_LOOP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

from rt_appliance.errors import UsageError
from rt_appliance.transport import loops
from rt_lab.testing.cluster import write_local_config


def test_uvloop_by_default_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loops.ENV, raising=False)
    loop = loops.new_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setenv(loops.ENV, "asyncio")
    loop = loops.new_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
        assert isinstance(loop, asyncio.AbstractEventLoop)
    finally:
        loop.close()


def test_an_unknown_loop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loops.ENV, "trio")
    with pytest.raises(UsageError, match="RT_EVENT_LOOP='trio': expected uvloop"):
        loops.new_loop()


def test_a_daemon_with_an_unknown_loop_says_so_and_exits_2(tmp_path: Path) -> None:
    config = write_local_config(tmp_path, nodes=1)
    command = ["node", "--config", str(config), "--node", "rt-1"]
    result = subprocess.run(
        [sys.executable, "-m", "rt_appliance.cli", *command],
        env={**os.environ, loops.ENV: "trio"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "rt: error: RT_EVENT_LOOP='trio': expected uvloop" in result.stderr
