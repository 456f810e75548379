"""A file in memory that a harness rewrites for every input (decoders that take a path)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MemFile"]


class MemFile:
    """One memfd per harness, opened by path like any file: no disk writes, nothing left
    behind."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._fd = -1

    def holding(self, content: bytes) -> Path:
        """The path of the file, now holding exactly ``content``."""
        if self._fd < 0:
            self._fd = os.memfd_create(self.name, os.MFD_CLOEXEC)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, content, 0)
        return Path(f"/proc/self/fd/{self._fd}")
