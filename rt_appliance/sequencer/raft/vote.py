"""Raft's current term and vote, kept on disk (pysyncobj keeps them only in memory).

Raft is safe only if a node never votes twice in one term and its term never goes
back, also across restarts. :class:`VoteStore` keeps ``{"term", "voted_for"}`` in
``raft.vote`` next to the journal; the raft transport saves it before any message
leaves the node whenever either changed, and restores it when the node starts.
Each save writes a new file, fsyncs it, renames it over the old one and fsyncs the
directory, so the file is always one whole save or the one before.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import RTError
from rt_appliance.log.segments import fsync_dir

__all__ = ["Vote", "VoteStore"]


@dataclass(frozen=True, slots=True)
class Vote:
    """The term a node is in and whom it voted for in it (None: nobody yet)."""

    term: int = 0
    voted_for: str | None = None


class VoteStore:
    """``raft.vote`` in ``directory``: :meth:`load` at start, :meth:`save` on change."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "raft.vote"
        self.saved = self.load()

    def load(self) -> Vote:
        """The saved vote; ``Vote()`` when the node has never saved one."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return Vote()
        try:
            doc = json.loads(text)
            term, voted_for = doc["term"], doc["voted_for"]
            if not isinstance(term, int) or term < 0:
                raise ValueError(f"term {term!r}")
            if voted_for is not None and not isinstance(voted_for, str):
                raise ValueError(f"voted_for {voted_for!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise RTError(
                f"{self.path} is unreadable ({exc}): this node's raft term and vote are "
                "unknown, so it cannot take part safely. If the disk is sound and this node "
                "was stopped for longer than an election, move the file away to start again "
                "from term 0."
            ) from exc
        return Vote(term, voted_for)

    def save(self, vote: Vote) -> None:
        """Make ``vote`` durable (a no-op when it is what was saved last)."""
        if vote == self.saved:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = json.dumps({"term": vote.term, "voted_for": vote.voted_for}).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.saved = vote
