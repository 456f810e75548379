"""Writing benchmark results into ``docs/BENCHMARKS.md``, one marked section per suite."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from rt_appliance.bench.stats import Result

__all__ = ["markdown_table", "write_section"]


def markdown_table(results: list[Result]) -> str:
    lines = ["| measurement | median | unit | target | runs | note |", "|---|---:|---|---|---|---|"]
    for r in results:
        runs = ", ".join(_fmt(v) for v in r.values)
        lines.append(f"| {r.name} | {_fmt(r.median)} | {r.unit} | {r.target} | {runs} | {r.note} |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def write_section(
    doc: Path, suite: str, command: str, machine: str, results: list[Result], notes: str
) -> None:
    """Replace (or append) the section of ``suite`` in ``doc``."""
    start, end = f"<!-- bench:{suite}:start -->", f"<!-- bench:{suite}:end -->"
    body = (
        f"{start}\n## `rt bench {suite}`\n\n"
        f"Measured {dt.date.today().isoformat()} with `{command}` on {machine}.\n\n"
        f"{markdown_table(results)}\n\n{notes.strip()}\n{end}"
    )
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: body, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + body + "\n"
    )
    doc.write_text(text)
