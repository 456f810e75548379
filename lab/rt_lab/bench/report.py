"""Writing benchmark results into ``docs/BENCHMARKS.md``, one marked section per suite."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from rt_lab.bench.stats import Result

__all__ = ["markdown_table", "write_markdown_section", "write_section"]


def markdown_table(results: list[Result]) -> str:
    lines = ["| measurement | median | unit | target | runs | note |", "|---|---:|---|---|---|---|"]
    for r in results:
        runs = ", ".join(_fmt(v) for v in r.values)
        lines.append(f"| {r.name} | {_fmt(r.median)} | {r.unit} | {r.target} | {runs} | {r.note} |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def write_section(
    doc: Path, suite: str, command: str, machine: str, results: list[Result], notes: str = ""
) -> None:
    """Replace (or append) the section of ``suite`` in ``doc``: what lies between its
    ``<!-- bench:SUITE:start -->`` and ``<!-- bench:SUITE:end -->`` markers (the heading,
    the command, the machine, the table and ``notes``). The rest of ``doc``, such as
    notes written after the end marker, is kept."""
    write_markdown_section(doc, suite, command, machine, markdown_table(results), notes)


def write_markdown_section(
    doc: Path, suite: str, command: str, machine: str, table: str, notes: str = ""
) -> None:
    """:func:`write_section` for a suite whose table has columns of its own."""
    start, end = f"<!-- bench:{suite}:start -->", f"<!-- bench:{suite}:end -->"
    extra = f"{notes.strip()}\n" if notes.strip() else ""
    body = (
        f"{start}\n## `rt bench {suite}`\n\n"
        f"Measured {dt.date.today().isoformat()} with `{command}` on {machine}.\n\n"
        f"{table}\n\n{extra}{end}"
    )
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: body, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + body + "\n"
    )
    doc.write_text(text)
