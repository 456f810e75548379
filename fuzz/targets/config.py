"""Harness: loading ``rt.yaml`` (``config/load.py``) from a file holding any bytes.

An operator's file can hold anything: bad YAML, bad UTF-8, structures no schema
expects. ``load_config`` returns a configuration or raises ``ConfigError`` whose every
problem starts with the file's name (``rt`` prints them and exits with status 2); any
other exception is a traceback instead of an answer.
"""

from __future__ import annotations

from pathlib import Path

from fuzz.targets import Target
from fuzz.targets.memfile import MemFile
from rt_appliance.config.load import ConfigError, load_config

__all__ = ["EXAMPLE", "TARGET", "check"]

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "rt.yaml"


def seeds() -> list[bytes]:
    example = EXAMPLE.read_bytes()
    return [example, example[: len(example) // 2], b"stream: {}\nnodes: []\n", b""]


_FILE = MemFile("rt-fuzz-config")


def check(data: bytes) -> None:
    path = _FILE.holding(data)
    try:
        load_config(path)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError without problems"
        bad = [p for p in exc.problems if not p.startswith(f"{path}:")]
        assert not bad, f"problems that do not name the file: {bad}"


TARGET = Target("config", check, seeds, max_len=16384)
