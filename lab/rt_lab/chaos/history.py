"""What the applications of a chaos run were told and what they got, read back from
their journals (format in :mod:`rt_lab.chaos.apps`) and from the logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.log.naming import is_dedup_topic
from rt_appliance.subscribe import Subscriber

__all__ = ["Delivery", "PublisherHistory", "read_delivered", "read_journal", "read_log"]

Delivery = tuple[str, str, str]  # (topic, host, key): key is the payload, or a .dedup id


@dataclass(slots=True)
class PublisherHistory:
    """One publisher's messages: every one it tried, in order, and those acknowledged."""

    topic: str
    host: str
    attempted: list[str] = field(default_factory=list)  # keys in publish order
    acked: set[str] = field(default_factory=set)
    incarnations: int = 0

    @property
    def dedup(self) -> bool:
        return is_dedup_topic(self.topic)

    def key(self, incarnation: int, number: int) -> str:
        return str(number) if self.dedup else f"{self.host}:{incarnation}:{number}"


def read_journal(path: Path, topic: str, host: str) -> PublisherHistory:
    """Replay a publisher journal (``S``, ``T``, ``K`` lines); a torn last line is ignored."""
    history = PublisherHistory(topic, host)
    tried: list[tuple[int, int]] = []  # (first, last) of the current incarnation
    incarnation = 0

    def close_incarnation(acked: int) -> None:
        for first, last in tried:
            for n in range(first, last + 1):
                key = history.key(incarnation, n)
                history.attempted.append(key)
                if n <= acked:
                    history.acked.add(key)
        tried.clear()

    acked = 0
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines(keepends=True):
        parts = line.split()
        if not line.endswith("\n") or len(parts) < 2 or not all(p.isdigit() for p in parts[1:]):
            continue
        if parts[0] == "S":
            close_incarnation(acked)
            incarnation, acked = int(parts[1]), 0
            history.incarnations += 1
        elif parts[0] == "T" and len(parts) == 3:
            tried.append((int(parts[1]), int(parts[2])))
        elif parts[0] == "K":
            acked = max(acked, int(parts[1]))
    close_incarnation(acked)
    return history


def read_delivered(path: Path) -> list[Delivery]:
    """The deliveries of a subscriber journal, up to its last whole batch (``P`` line)."""
    out: list[Delivery] = []
    batch: list[Delivery] = []
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        if line.startswith("D "):
            parts = line[2:].rstrip("\n").split(" ", 2)
            if len(parts) == 3:
                batch.append((parts[0], parts[1], parts[2]))
        elif line.startswith("P "):
            out += batch
            batch = []
    return out


def read_log(directory: Path) -> list[Delivery]:
    """Every message of a stream directory (a merged log or a copy), as deliveries."""
    out: list[Delivery] = []
    if not directory.is_dir():
        return out
    for batch in Subscriber(directory).read_batches(0, follow=False):
        if is_dedup_topic(batch.topic):
            keys = [str(i) for i in batch.ids]
        else:
            keys = [p.decode(errors="replace") for p in batch.payloads]
        out += [(batch.topic, batch.host, k) for k in keys]
    return out
