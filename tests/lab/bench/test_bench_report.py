"""write_section: a new run replaces its suite's marked section and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_lab.bench.report import write_section
from rt_lab.bench.stats import Result

pytestmark = pytest.mark.unit


def _results(value: float) -> list[Result]:
    return [Result("batch publish", "msg/s", ">= 1", [value])]


def test_a_new_run_keeps_the_notes_written_after_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    write_section(doc, "log", "rt bench log", "a machine", _results(111), "Payloads of 100 bytes.")
    write_section(doc, "cluster", "rt bench cluster", "a machine", _results(5), "Targets: met")
    text = doc.read_text()
    notes = "\n### Notes on the run\n\nWritten by hand.\n"
    end = "<!-- bench:log:end -->\n"
    doc.write_text(text.replace(end, end + notes))

    write_section(doc, "log", "rt bench log --runs 1", "another machine", _results(222))
    text = doc.read_text()
    assert "### Notes on the run\n\nWritten by hand." in text
    assert text.index("<!-- bench:log:end -->") < text.index("### Notes on the run")
    assert text.index("### Notes on the run") < text.index("<!-- bench:cluster:start -->")
    assert "222" in text and "111" not in text and "Payloads of 100 bytes." not in text
    assert "rt bench log --runs 1" in text and "another machine" in text
    assert "Targets: met" in text  # the other suite's section is untouched
    assert text.count("<!-- bench:log:start -->") == 1
