"""What a chaos run needs of a network to partition it, however it is made: network
namespaces (:class:`~rt_lab.chaos.world.Network`) or TCP relays
(:class:`~rt_lab.chaos.relays.RelayNetwork`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

__all__ = ["Partitions"]


class Partitions(ABC):
    """Links between nodes that can be blocked one way, a node that can be cut off from
    everything, and a heal that undoes it all."""

    @abstractmethod
    def block(self, src: str, dst: str) -> None:
        """Stop what ``src`` sends to ``dst`` (one way)."""

    @abstractmethod
    def cut(self, name: str) -> None:
        """Unplug node ``name`` from everything, its clients too."""

    @abstractmethod
    def heal(self) -> None:
        """Every link as it was."""

    @abstractmethod
    def close(self) -> None:
        """Take the network down."""

    def split(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """No traffic between any node of ``side_a`` and any of ``side_b``."""
        side_b = list(side_b)
        for a in side_a:
            for b in side_b:
                self.block(a, b)
                self.block(b, a)
