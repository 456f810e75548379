"""Small helpers for benchmarks: timing, medians, percentiles, resident memory, the machine."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Result", "filesystem_of", "machine_description", "percentile", "rss_bytes"]


def percentile(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (``0 <= p <= 100``) of ``values``, by linear interpolation.

    The values are sorted; the percentile lies at index ``p / 100 * (n - 1)`` of the
    sorted values, and between two values it is interpolated linearly. This is numpy's
    default method, ``statistics.median`` for ``p = 50``, the smallest value for ``p = 0``
    and the largest for ``p = 100``. Of ``[1, 2, 3, 4]``, the 50th percentile is 2.5 and
    the 90th 3.7. Raises ``ValueError`` if there are no values or ``p`` is out of range.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not within 0..100")
    at = p / 100 * (len(ordered) - 1)
    below = int(at)
    if below == len(ordered) - 1:
        return float(ordered[below])
    low, high = ordered[below], ordered[below + 1]
    return float(low + (high - low) * (at - below))


@dataclass(slots=True)
class Result:
    """One measured quantity over several runs."""

    name: str
    unit: str
    target: str
    values: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "unit": self.unit,
            "target": self.target,
            "median": self.median,
            "runs": self.values,
            "note": self.note,
        }


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of process ``pid`` (default: this one), from /proc; 0 if it is gone."""
    try:
        with open(f"/proc/{pid or 'self'}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass  # the process has exited: it holds nothing
    return 0


def machine_description() -> str:
    """CPU model, cores, memory, kernel, Python and the filesystem of the work directory."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def filesystem_of(path: str) -> str:
    """The filesystem type and device holding ``path`` (from ``df``)."""
    try:
        out = subprocess.run(["df", "-T", path], capture_output=True, text=True, check=True).stdout
        fields = out.splitlines()[1].split()
        return f"{fields[1]} on {fields[0]}"
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown filesystem"
