"""Checks the tests and the demo share: is a copy of a stream directory exact?"""

from __future__ import annotations

from pathlib import Path

from rt_appliance.log.segments import list_files

__all__ = ["log_files", "same_log_files"]


def log_files(directory: Path) -> dict[str, bytes]:
    """``{file name: bytes}`` of the stream files (``log.X.Y``) of ``directory``."""
    return {f.path.name: f.path.read_bytes() for f in list_files(directory)}


def same_log_files(expected: dict[str, bytes], directory: Path) -> bool:
    """Whether ``directory`` holds exactly the files and bytes of ``expected``."""
    try:
        return log_files(directory) == expected
    except FileNotFoundError:  # a file deleted while reading: not settled yet
        return False
