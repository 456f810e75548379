"""Capped, jittered exponential backoff for reconnecting."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays that double from ``initial_s`` up to ``max_s``, each drawn with full jitter.

    Full jitter (uniform in [d/2, d]) keeps many clients that lost the same node
    from reconnecting in lockstep. :meth:`reset` after a connection succeeds.
    """

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.initial_s, self.max_s = initial_s, max_s
        self._rng = rng or random.Random()
        self._ceiling = initial_s

    def next_delay(self) -> float:
        delay = self._rng.uniform(self._ceiling / 2, self._ceiling)
        self._ceiling = min(self._ceiling * 2, self.max_s)
        return delay

    def to_ceiling(self) -> None:
        """Wait the longest from now on (until :meth:`reset`): the peer keeps refusing."""
        self._ceiling = self.max_s

    def reset(self) -> None:
        self._ceiling = self.initial_s
