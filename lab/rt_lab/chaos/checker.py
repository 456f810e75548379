"""Judges a chaos run in Jepsen's categories, from what each publisher was told was
durable and what each reader delivered.

* **lost**: acknowledged as durable, never delivered;
* **duplicated**: a message of a plain topic delivered more than once;
* **reordered**: a publisher's messages delivered out of the order it published them;
* **unexpected**: something delivered that no publisher published;
* **dedup**: an id of a ``.dedup`` topic delivered twice (at or below the watermark);
* **divergent**: merged logs or copies that differ, or a subscriber application that
  delivered something else than the merged log holds;
* **stuck**: the stream did not settle within a bound after the faults stopped.

Messages published but never acknowledged may be lost; they are counted apart
(``unacked_lost``, ``unacked_delivered``) and are not violations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rt_appliance.log.naming import is_dedup_topic
from rt_lab.chaos.history import Delivery, PublisherHistory
from rt_lab.testing.checkers import EXAMPLES_PER_KIND, count_delivery, file_order

__all__ = ["SAFETY", "Category", "Verdict", "judge_reader"]

SAFETY = ("lost", "duplicated", "reordered", "unexpected", "dedup", "divergent", "stuck")


@dataclass(slots=True)
class Category:
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, count: int, examples: Iterable[str] = ()) -> None:
        self.count += count
        room = EXAMPLES_PER_KIND * 2 - len(self.examples)
        self.examples += list(examples)[: max(0, room)]


@dataclass(slots=True)
class Verdict:
    """The whole run's counts per category, with examples."""

    categories: dict[str, Category] = field(default_factory=lambda: {k: Category() for k in SAFETY})
    checked: int = 0  # messages delivered by the merged log that was read
    acked: int = 0
    attempted: int = 0
    unacked_lost: int = 0
    unacked_delivered: int = 0

    def __getitem__(self, name: str) -> Category:
        return self.categories[name]

    @property
    def violations(self) -> int:
        return sum(c.count for c in self.categories.values())

    @property
    def safe(self) -> bool:
        return self.violations == 0


def _plain(delivered: Sequence[Delivery]) -> list[Delivery]:
    return [d for d in delivered if not is_dedup_topic(d[0])]


def judge_reader(
    verdict: Verdict,
    reader: str,
    delivered: Sequence[Delivery],
    histories: Sequence[PublisherHistory],
) -> None:
    """Add what ``reader`` (a node's merged log, a subscriber application) delivered to
    ``verdict``: lost, duplicated, reordered, unexpected and dedup violations."""
    plain = [h for h in histories if not h.dedup]
    expected = {(h.topic, h.host): h.attempted for h in plain}
    report = count_delivery(_plain(delivered), expected)
    verdict["duplicated"].add(report.duplicated, _examples(reader, report.examples, "delivered"))
    verdict["reordered"].add(report.out_of_order, _examples(reader, report.examples, "after a"))
    verdict["unexpected"].add(report.unexpected, _examples(reader, report.examples, "never"))
    seen = {(d[0], d[1], d[2]) for d in delivered}
    for h in plain:
        lost = [k for k in h.attempted if k in h.acked and (h.topic, h.host, k) not in seen]
        verdict["lost"].add(len(lost), [f"{reader}: {h.topic}.{h.host} {k}" for k in lost[:3]])
    dedup_topics = sorted({h.topic for h in histories if h.dedup})
    for topic in dedup_topics:
        _judge_dedup(verdict, reader, topic, delivered, [h for h in histories if h.topic == topic])


def _examples(reader: str, examples: Iterable[str], marker: str) -> list[str]:
    return [f"{reader}: {e}" for e in examples if marker in e]


def _judge_dedup(
    verdict: Verdict,
    reader: str,
    topic: str,
    delivered: Sequence[Delivery],
    pair: Sequence[PublisherHistory],
) -> None:
    ids = [int(key) for t, _host, key in delivered if t == topic]
    counts = Counter(ids)
    twice = sorted(i for i, n in counts.items() if n > 1)
    verdict["dedup"].add(
        sum(counts[i] - 1 for i in twice), [f"{reader}: {topic} id {i} twice" for i in twice[:3]]
    )
    highest, behind = 0, []
    for i in ids:
        if i < highest:
            behind.append(i)
        highest = max(highest, i)
    verdict["reordered"].add(
        len(behind), [f"{reader}: {topic} id {i} after a higher one" for i in behind[:3]]
    )
    attempted = {int(k) for h in pair for k in h.attempted}
    acked = {int(k) for h in pair for k in h.acked}
    strangers = sorted(set(ids) - attempted)
    verdict["unexpected"].add(
        len(strangers), [f"{reader}: {topic} id {i} never published" for i in strangers[:3]]
    )
    lost = sorted(acked - set(ids))
    verdict["lost"].add(len(lost), [f"{reader}: {topic} id {i}" for i in lost[:3]])


def count_unacked(
    verdict: Verdict, delivered: Sequence[Delivery], histories: Sequence[PublisherHistory]
) -> None:
    """Totals of the run, from the merged log that was read: messages tried, acknowledged,
    and of those never acknowledged how many were delivered or lost (allowed)."""
    seen = {(d[0], d[2]) if is_dedup_topic(d[0]) else d for d in delivered}
    verdict.checked = len(delivered)
    tried_dedup: dict[str, set[str]] = {}
    acked_dedup: dict[str, set[str]] = {}
    for h in histories:
        if h.dedup:
            tried_dedup.setdefault(h.topic, set()).update(h.attempted)
            acked_dedup.setdefault(h.topic, set()).update(h.acked)
            continue
        verdict.attempted += len(h.attempted)
        verdict.acked += len(h.acked)
        for k in h.attempted:
            if k not in h.acked:
                got = (h.topic, h.host, k) in seen
                verdict.unacked_delivered += got
                verdict.unacked_lost += not got
    for topic, tried in tried_dedup.items():
        acked = acked_dedup[topic]
        verdict.attempted += len(tried)
        verdict.acked += len(acked)
        for k in tried - acked:
            got = (topic, k) in seen
            verdict.unacked_delivered += got
            verdict.unacked_lost += not got


def judge_copies(verdict: Verdict, reference: str, logs: Mapping[str, Sequence[Delivery]]) -> None:
    """``divergent`` for every reader in ``logs`` whose deliveries are not exactly
    those of ``reference`` (e.g. a subscriber application against the merged log)."""
    want = logs[reference]
    for name, got in logs.items():
        if name == reference or list(got) == list(want):
            continue
        at = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
        if at is None:
            what = f"{len(got)} messages, {len(want)} in {reference}"
        else:
            what = f"message #{at + 1} is {got[at]!r}, {want[at]!r} in {reference}"
        verdict["divergent"].add(1, [f"{name}: {what}"])


def judge_slice(
    verdict: Verdict, name: str, got: Sequence[Delivery], reference: str, want: Sequence[Delivery]
) -> None:
    """``divergent`` unless ``got`` (a node's merged log) is one unbroken run of ``want``
    (what the reference application delivered, from the first message on): the whole
    of it, or what is left once the archiver has pruned the oldest files, or a log that
    is behind."""
    if not got:
        return
    first = next((i for i, d in enumerate(want) if d == got[0]), None)
    if first is None:
        verdict["divergent"].add(1, [f"{name}: its first message {got[0]!r} not in {reference}"])
        return
    run = list(want[first : first + len(got)])
    if run == list(got):
        return
    at = next((i for i, (a, b) in enumerate(zip(run, got, strict=False)) if a != b), len(run))
    theirs = run[at] if at < len(run) else "nothing"
    verdict["divergent"].add(
        1, [f"{name}: message #{first + at + 1} is {got[at]!r}, {theirs!r} in {reference}"]
    )


def compare_files(files: Mapping[str, bytes], ref: Mapping[str, bytes]) -> str | None:
    """How the stream files ``files`` ({name: bytes}) stand against ``ref``: ``None`` if
    they hold the same from where both begin, ``"behind"`` if they stop earlier (the
    last file cut short, later files missing), else the first file that differs. The
    oldest files of either may be gone: the archiver prunes them."""
    mine, theirs = sorted(files, key=file_order), sorted(ref, key=file_order)
    if not mine:
        return "behind" if theirs else None
    if not theirs:
        return mine[0]
    start = max(file_order(mine[0]), file_order(theirs[0]))
    mine = [n for n in mine if file_order(n) >= start]
    theirs = [n for n in theirs if file_order(n) >= start]
    for i, name in enumerate(mine):
        if i >= len(theirs) or theirs[i] != name:
            return name
        if files[name] == ref[name]:
            continue
        if i != len(mine) - 1 or not ref[name].startswith(files[name]):
            return name
        return "behind"
    return None if len(mine) == len(theirs) else "behind"


def _end(files: Mapping[str, bytes]) -> tuple[tuple[int, ...], int]:
    """Where a log ends: its last file, and that file's size."""
    if not files:
        return ((), 0)
    last = max(files, key=file_order)
    return (file_order(last), len(files[last]))


def judge_logs(verdict: Verdict, logs: Mapping[str, Mapping[str, bytes]]) -> list[str]:
    """Compare every merged log and copy with the one that reaches furthest: ``divergent``
    for each that differs in content; returns the names of those that are only behind."""
    if not logs:
        return []
    furthest = max(logs, key=lambda name: _end(logs[name]))
    behind = []
    for name, files in logs.items():
        if name == furthest:
            continue
        found = compare_files(files, logs[furthest])
        if found == "behind":
            behind.append(name)
        elif found is not None:
            verdict["divergent"].add(1, [f"{name}: differs from {furthest} in {found}"])
    return behind
