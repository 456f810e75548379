"""The monitor keeps marking where the merged logs end while a status round waits on a
node that does not answer: the stall of a paused or cut-off node is the stream's, not
the monitor's own blind spot."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rt_lab.chaos import monitor as monitor_module
from rt_lab.chaos.monitor import Monitor

pytestmark = pytest.mark.unit


def _wait(condition: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_marks_go_on_while_a_status_round_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged = tmp_path / "rt-1" / "merged"
    merged.mkdir(parents=True)
    log = merged / "log.1.0"
    log.write_bytes(b"x" * 100)
    asked, answer = threading.Event(), threading.Event()

    async def hanging_status(*args: Any) -> dict[str, Any]:  # a node that never answers
        asked.set()
        await asyncio.to_thread(answer.wait)
        return {}

    monkeypatch.setattr(monitor_module, "gather_status", hanging_status)
    stream = SimpleNamespace(
        config=None, node_names=["rt-1"], merged_dir=lambda name: merged, daemons={}
    )
    monitor = Monitor(stream, time.monotonic()).start()  # type: ignore[arg-type]
    try:
        assert _wait(asked.is_set), "the first status round never began"
        log.write_bytes(b"x" * 250)  # merging goes on while the round waits
        assert _wait(lambda: any(end[2] == 250 for _, end in monitor.marks)), monitor.marks
        assert not answer.is_set() and monitor.samples == []  # still inside that round
    finally:
        answer.set()
        monitor.stop()
    assert _wait(lambda: len(monitor.samples) >= 1)
