"""Byte sizes with units, as written in configuration and on the command line (``1GiB``)."""

from __future__ import annotations

import re

from rt_appliance.errors import UsageError

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
    "t": 1 << 40,
}
_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str | int) -> int:
    """``"1GiB"`` -> 1073741824. Decimal units (kB, MB) are powers of 10, binary (KiB) of 2."""
    if isinstance(text, int):
        return text
    match = _SIZE_RE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise UsageError(f"not a size: {text!r} (examples: 4096, 64MiB, 1GiB, 10GB)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(nbytes: int) -> str:
    """A short human form: ``1.0 GiB``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
