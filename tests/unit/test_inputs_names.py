"""Which inputs a node has: from its push server at once, from a listing of ``in/`` at most
once per ``INPUT_LISTING_EVERY_S`` (not a stat of the directory per planner step)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rt_appliance.limits import INPUT_LISTING_EVERY_S
from rt_appliance.sequencer import inputs as inputs_module
from rt_appliance.sequencer.inputs import Inputs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.stat`` is asked about while listing."""
    seen: list[str] = []
    real = os.stat

    def counting(path: object, *args: object, **kwargs: object) -> os.stat_result:
        seen.append(str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("rt_appliance.log.segments.os.stat", counting)
    return seen


def test_the_push_servers_inputs_at_once_the_rest_by_a_listing_now_and_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stats: list[str]
) -> None:
    clock = Clock()
    monkeypatch.setattr(inputs_module.time, "monotonic", clock)
    in_dir = tmp_path / "in"
    (in_dir / "trades.pub-1").mkdir(parents=True)
    known = ["quotes.pub-2"]
    inputs = Inputs(in_dir, sync=False, held=lambda name: None, known=lambda: known)

    assert inputs.names() == ["quotes.pub-2", "trades.pub-1"]
    assert stats.count(str(in_dir)) == 1
    for _ in range(50):  # a planner step each
        inputs.names()
    assert stats.count(str(in_dir)) == 1

    known.append("news.pub-3")  # a publisher offered a new input to the push server
    assert inputs.names() == ["news.pub-3", "quotes.pub-2", "trades.pub-1"]

    (in_dir / "fx.pub-4").mkdir()  # made some other way: found by the next listing
    assert "fx.pub-4" not in inputs.names()
    clock.now += INPUT_LISTING_EVERY_S
    assert inputs.names() == ["fx.pub-4", "news.pub-3", "quotes.pub-2", "trades.pub-1"]
    assert stats.count(str(in_dir)) == 2


def test_without_a_push_server_every_call_looks(tmp_path: Path, stats: list[str]) -> None:
    in_dir = tmp_path / "in"
    (in_dir / "trades.pub-1").mkdir(parents=True)
    inputs = Inputs(in_dir, sync=False, held=lambda name: None)
    assert inputs.names() == ["trades.pub-1"]
    (in_dir / "quotes.pub-2").mkdir()
    os.utime(in_dir, ns=(0, 0))  # a listing cached at another mtime is not trusted
    assert inputs.names() == ["quotes.pub-2", "trades.pub-1"]
    assert stats.count(str(in_dir)) == 2
