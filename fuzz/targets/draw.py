"""Parameters taken from the front of a fuzz input; the rest is the bytes under test.

The parameters come first so that the fuzzer's mutations of the tested bytes (the bulk
of an input) leave them alone, and a missing byte reads as 0: every input is usable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["Draw"]

T = TypeVar("T")


class Draw:
    """Reads parameters off the front of ``data``."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def byte(self) -> int:
        """The next byte, or 0 past the end."""
        if self._at >= len(self._data):
            return 0
        self._at += 1
        return self._data[self._at - 1]

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``, picked by the next byte."""
        return options[self.byte() % len(options)]

    def rest(self) -> bytes:
        """Everything not taken yet."""
        rest = self._data[self._at :]
        self._at = len(self._data)
        return rest
