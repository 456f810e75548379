"""``rt bench floor`` measures real steps: TLS between processes, inotify, fdatasync, threads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rt_lab.bench.floor import KINDS, run_floor_bench, run_on


def test_every_kind_of_step_is_measured_at_both_rates(tmp_path: Path) -> None:
    seen: list[str] = []
    found = run_floor_bench(tmp_path, runs=1, seconds=0.5, idle_rate=20, progress=seen.append)
    assert len(seen) == 2 and "tls p50" in seen[0]
    (run,) = found.runs
    for kind in KINDS:
        idle, busy = run[kind][20], run[kind][1000]
        assert len(idle.latencies) == 10, kind  # 20/s for 0.5 s
        assert len(busy.latencies) >= 100, kind  # the sync runs at most 200/s
        for figures in (idle, busy):
            assert 0 < figures.p(50) < 0.1, kind  # every step happened, none took 100 ms
            assert figures.cpu_per_step >= 0, kind
    names = [r.name for r in found.results()]
    assert "floor: idle latency along the path" in names
    assert not list(tmp_path.iterdir())  # its certificates and files are removed


def test_uvloop_runs_the_steps_that_wait_on_a_loop(tmp_path: Path) -> None:
    found = run_floor_bench(tmp_path, runs=1, seconds=0.5, idle_rate=20, loop="uvloop")
    (run,) = found.runs
    for kind in ("tls", "inotify", "thread"):
        assert len(run[kind][20].latencies) == 10, kind
        assert 0 < run[kind][1000].p(50) < 0.1, kind
    assert "tls on uvloop at 20/s: latency p50" in [r.name for r in found.results()]


def test_an_unknown_loop_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown event loop 'trio': choose from asyncio, uvloop"):
        run_floor_bench(tmp_path, runs=1, seconds=0.1, loop="trio")


def test_run_on_gives_the_loop_asked_for() -> None:
    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__.split(".")[0]

    assert run_on("uvloop", kind()) == "uvloop"
    assert run_on("asyncio", kind()) == "asyncio"
