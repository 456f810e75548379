"""Shrinking a failing input to the bytes that make it fail, in plain Python.

A failure is known by its exception type and the line that raised it, so shrinking does
not slide from one bug to another. Only failures that raise are shrunk here: a memory
error in the compiled walk ends the process, and is reproduced with ``--reproduce``.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from fuzz.targets import Target

__all__ = ["minimize", "shrink", "signature"]

Signature = tuple[str, str, int]


def signature(target: Target, data: bytes) -> Signature | None:
    """How ``data`` fails the target (exception type, file, line), or None if it passes."""
    try:
        target.check(data)
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return type(exc).__name__, last.filename, last.lineno or 0
    return None


def shrink(target: Target, data: bytes) -> bytes:
    """The shortest input found by cutting runs of bytes out of ``data`` (halving the run
    length down to one byte) that still fails the same way; then each byte made 0 if it
    can be, so what is left stands out."""
    want = signature(target, data)
    if want is None:
        raise ValueError("the input does not fail")
    run = max(len(data) // 2, 1)
    while run >= 1 and data:
        at, cut = 0, False
        while at < len(data):
            candidate = data[:at] + data[at + run :]
            if signature(target, candidate) == want:
                data, cut = candidate, True
            else:
                at += run
        if not cut:
            run //= 2
    for at in range(len(data)):
        if data[at]:
            candidate = data[:at] + b"\0" + data[at + 1 :]
            if signature(target, candidate) == want:
                data = candidate
    return data


def minimize(target: Target, path: Path) -> int:
    """Shrink the input in ``path`` into ``path.min``, show it and how it fails."""
    data = path.read_bytes()
    try:
        small = shrink(target, data)
    except ValueError:
        print(f"fuzz: {path} passes {target.name} in plain Python; try --reproduce")
        return 1
    out = path.with_name(path.name + ".min")
    out.write_bytes(small)
    print(f"fuzz: {len(data)} -> {len(small)} bytes in {out}: {small!r}")
    try:
        target.check(small)
    except Exception:
        traceback.print_exc()
    return 0
