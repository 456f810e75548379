"""The fuzz targets: one harness per decoder of outside bytes.

A harness is a function of one byte string that returns when the decoder behaved (a
value, or the one error its callers handle) and raises anything else: an unexpected
exception, or an ``AssertionError`` when a result breaks the decoder's contract. It
must not import atheris, so the test suite can run it as a plain function.

This module imports nothing of ``rt_appliance``: the fuzzer instruments the decoders
for coverage as the harness module imports them, which only works on a first import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["NAMES", "TRACED", "Target", "load"]

NAMES = ("frames", "messages", "control", "raft", "file_header", "walk", "config")
# The packages whose Python code the fuzzer traces for coverage, per target. They must be
# known before the harness module is imported, so they are here and not in its Target.
# "json" runs as pure Python while fuzzing (fuzz.engine): the branches of its C
# accelerator are invisible to the fuzzer, and CPython keeps the two equivalent.
TRACED: dict[str, tuple[str, ...]] = {name: ("rt_appliance",) for name in NAMES} | {
    "messages": ("rt_appliance", "json"),
    "control": ("rt_appliance", "json"),
    "config": ("rt_appliance", "yaml"),
}


@dataclass(frozen=True, slots=True)
class Target:
    """One harness and how to fuzz it."""

    name: str
    check: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]  # valid inputs built by the encoders: coverage starts deep
    max_len: int = 4096  # libFuzzer's -max_len: the largest input it builds
    timeout_s: int = 10  # one input running longer than this is reported as a hang
    native: bool = False  # runs the compiled record walk: fuzzed with its ASan build


def load(name: str) -> Target:
    """The target ``name`` (importing its harness, and with it the decoders it fuzzes)."""
    if name not in NAMES:
        raise ValueError(f"unknown fuzz target {name!r}; one of {', '.join(NAMES)}")
    target: Target = importlib.import_module(f"fuzz.targets.{name}").TARGET
    return target
