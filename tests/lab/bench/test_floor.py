"""The floors ``rt bench floor`` derives from its step figures."""

from __future__ import annotations

import pytest

from rt_lab.bench.floor import HOSTS, KINDS, PATH, FloorResults, StepFigures


def _run(latency_s: dict[int, float], cpu_s: dict[int, float]) -> dict[str, dict[int, StepFigures]]:
    return {k: {r: StepFigures([latency_s[r]] * 3, cpu_s[r]) for r in (20, 1000)} for k in KINDS}


def test_the_floors_add_up_the_path_step_by_step() -> None:
    found = FloorResults(20, 1000, [_run({20: 300e-6, 1000: 80e-6}, {20: 250e-6, 1000: 70e-6})])
    by_name = {r.name: r for r in found.results()}
    for label, counts in (("", PATH), (" between hosts", HOSTS)):
        steps = sum(counts.values())
        idle = by_name[f"floor{label}: idle latency along the path"]
        assert idle.median == pytest.approx(steps * 0.3)
        # every tick's own trip: 70 us per step, a thousand ticks a second, of a core
        cpu = by_name[f"floor{label}: CPU at one tick per ms"].median
        assert cpu == pytest.approx(100 * steps * 70e-6 * 1000)
    # rt's layout: the hops between hosts, and its hand-offs to threads besides
    assert PATH["tls"] == HOSTS["tls"] == 4 and PATH["sync"] == HOSTS["sync"] == 1
    assert PATH["thread"] > HOSTS["thread"] == 0 and PATH["inotify"] == 0
    assert by_name["tls at 1,000/s: CPU per step"].median == pytest.approx(70)
    assert by_name["sync at 20/s: latency p50"].median == pytest.approx(300)


def test_medians_are_taken_over_the_runs() -> None:
    runs = [_run({20: v, 1000: v}, {20: v, 1000: v}) for v in (1e-6, 5e-6, 2e-6)]
    by_name = {r.name: r for r in FloorResults(20, 1000, runs).results()}
    assert by_name["thread at 20/s: latency p99"].values == pytest.approx([1, 5, 2])
    assert by_name["thread at 20/s: latency p99"].median == pytest.approx(2)


def test_figures_of_another_loop_are_named_after_it() -> None:
    run = _run({20: 1e-4, 1000: 1e-4}, {20: 1e-4, 1000: 1e-4})
    names = [r.name for r in FloorResults(20, 1000, [run], loop="uvloop").results()]
    assert "tls on uvloop at 1,000/s: CPU per step" in names
    assert "floor on uvloop: idle latency along the path" in names
    assert not any(name.startswith(("tls at", "floor:")) for name in names)
