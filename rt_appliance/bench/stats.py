"""Small helpers for benchmarks: timing, medians, resident memory, the machine."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from dataclasses import dataclass, field

__all__ = ["Result", "filesystem_of", "machine_description", "rss_bytes"]


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


def rss_bytes() -> int:
    """This process's resident set size, from /proc."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
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
