"""Checks the tests and the demo share: is a copy of a stream directory exact, and does the
merged log hold every published message exactly once, in each publisher's order?

Every fault test ends with :func:`check_merged` and :func:`assert_clean`:

* the merged logs of all given nodes are **byte-identical** (same file names, same
  bytes), waiting with a deadline until they converge;
* read with the :class:`Subscriber`, every published message appears **exactly once**;
* each publisher's messages appear in the **order it published them**.

:func:`count_delivery` is the pure part (messages in, counts out), so other readers
(the demo's subscriber process, a Spark job) are judged the same way.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import Counter, defaultdict, deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rt_appliance.errors import RTError
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.subscribe import Subscriber

if TYPE_CHECKING:
    from rt_lab.testing.stream import LocalStream

__all__ = [
    "DeliveryReport",
    "LogComparison",
    "MergedReport",
    "SourceReport",
    "assert_clean",
    "check_merged",
    "compare_logs",
    "count_delivery",
    "file_order",
    "log_digest",
    "log_files",
    "log_files_or_empty",
    "same_log_files",
]

Source = tuple[str, str]  # (topic, host): one publisher directory
Expected = Mapping[Source, Sequence[Hashable]]  # ids or payloads, in publish order
EXAMPLES_PER_KIND = 3  # problems of each kind quoted per source in a report


def log_files(directory: Path) -> dict[str, bytes]:
    """``{file name: bytes}`` of the stream files (``log.X.Y``) of ``directory``."""
    return {f.path.name: f.path.read_bytes() for f in list_files(directory)}


def same_log_files(expected: dict[str, bytes], directory: Path) -> bool:
    """Whether ``directory`` holds exactly the files and bytes of ``expected``."""
    try:
        return log_files(directory) == expected
    except FileNotFoundError:  # a file deleted while reading: not settled yet
        return False


# -- byte-identical logs ---------------------------------------------------------------


def _digest(files: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in files.items():
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def log_digest(directory: Path) -> str:
    """SHA-256 (hex) of a stream directory: for each file in (session, roll) order, its
    name, a NUL, its size (8 bytes, little-endian) and its bytes. Equal digests mean the
    same file names with the same bytes. A missing directory counts as an empty log."""
    return _digest(log_files_or_empty(directory))


def log_files_or_empty(directory: Path) -> dict[str, bytes]:
    return log_files(directory) if directory.is_dir() else {}


@dataclass(frozen=True, slots=True)
class LogComparison:
    """The stream files of several directories side by side."""

    digests: dict[str, str]  # name -> log_digest
    sizes: dict[str, int]  # name -> total bytes of its stream files
    differences: list[str]  # one line per directory that differs from the first

    @property
    def identical(self) -> bool:
        return not self.differences


def _difference(
    ref_name: str, ref: Mapping[str, bytes], name: str, got: Mapping[str, bytes]
) -> str:
    """How ``got`` differs from ``ref``: behind (a prefix), ahead, or diverging (where)."""
    for file in sorted(set(ref) | set(got), key=file_order):
        a, b = ref.get(file), got.get(file)
        if a == b:
            continue
        if a is None or b is None:
            holder, other = (name, ref_name) if a is None else (ref_name, name)
            return f"{name}: {file} exists on {holder} but not on {other}"
        n = min(len(a), len(b))
        at = next((i for i in range(n) if a[i] != b[i]), n)
        if at < n:
            return f"{name}: {file} diverges from {ref_name} at byte {at}"
        shorter = name if len(b) < len(a) else ref_name
        return f"{name}: {file} is {len(b)} bytes, {len(a)} on {ref_name} ({shorter} is behind)"
    return f"{name}: differs from {ref_name}"


def file_order(name: str) -> tuple[int, ...]:
    parts = name.split(".")[1:]
    return tuple(int(p) for p in parts if p.isdigit())


def compare_logs(dirs: Mapping[str, Path]) -> LogComparison:
    """Compare the stream files of ``dirs`` (``{name: directory}``) with the first one's."""
    contents = {name: log_files_or_empty(d) for name, d in dirs.items()}
    digests = {name: _digest(files) for name, files in contents.items()}
    sizes = {name: sum(len(b) for b in files.values()) for name, files in contents.items()}
    differences: list[str] = []
    if contents:
        ref_name, ref = next(iter(contents.items()))
        for name, files in contents.items():
            if digests[name] != digests[ref_name]:
                differences.append(_difference(ref_name, ref, name, files))
    return LogComparison(digests, sizes, differences)


# -- every message exactly once, in order ----------------------------------------------


@dataclass(slots=True)
class SourceReport:
    """What one publisher directory published and what the log delivered of it."""

    published: int = 0
    delivered: int = 0
    missing: int = 0
    duplicated: int = 0  # deliveries beyond the first of a message
    out_of_order: int = 0  # deliveries of a message published before one delivered earlier
    unexpected: int = 0  # deliveries of messages that were never published

    @property
    def clean(self) -> bool:
        return not (self.missing or self.duplicated or self.out_of_order or self.unexpected)


@dataclass(slots=True)
class DeliveryReport:
    """Per publisher directory (``"<topic>.<host>"``) and in total."""

    sources: dict[str, SourceReport] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)  # the first few problems, readable

    def _total(self, what: str) -> int:
        return sum(int(getattr(s, what)) for s in self.sources.values())

    @property
    def published(self) -> int:
        return self._total("published")

    @property
    def delivered(self) -> int:
        return self._total("delivered")

    @property
    def missing(self) -> int:
        return self._total("missing")

    @property
    def duplicated(self) -> int:
        return self._total("duplicated")

    @property
    def out_of_order(self) -> int:
        return self._total("out_of_order")

    @property
    def unexpected(self) -> int:
        return self._total("unexpected")

    @property
    def clean(self) -> bool:
        return all(s.clean for s in self.sources.values())

    def as_dict(self) -> dict[str, object]:
        """Totals and per-source counts, for JSON."""
        keys = ("published", "delivered", "missing", "duplicated", "out_of_order", "unexpected")
        out: dict[str, object] = {k: getattr(self, k) for k in keys}
        out["sources"] = {
            name: {k: getattr(s, k) for k in keys} for name, s in self.sources.items()
        }
        return out


def _name(source: Source) -> str:
    return f"{source[0]}.{source[1]}"


def count_delivery(
    delivered: Iterable[tuple[str, str, Hashable]],
    expected: Expected,
    ignore_other_sources: bool = False,
) -> DeliveryReport:
    """Judge ``delivered`` ((topic, host, key) in delivery order) against ``expected``
    ({(topic, host): keys in publish order}); a key is an id or a payload.

    A key published n times may be delivered n times. Order is checked per source:
    a delivery whose publish index is below the highest one delivered before it is
    out of order. Messages of sources not in ``expected`` are unexpected unless
    ``ignore_other_sources``.
    """
    report = DeliveryReport()
    pending: dict[Source, dict[Hashable, deque[int]]] = {}
    highest: dict[Source, int] = {}
    for source, keys in expected.items():
        report.sources[_name(source)] = SourceReport(published=len(keys))
        by_key: dict[Hashable, deque[int]] = defaultdict(deque)
        for index, key in enumerate(keys):
            by_key[key].append(index)
        pending[source] = by_key
        highest[source] = -1

    quoted: Counter[tuple[str, str]] = Counter()

    def note(source: Source, kind: str, problem: str) -> None:
        quoted[(_name(source), kind)] += 1
        if quoted[(_name(source), kind)] <= EXAMPLES_PER_KIND:
            report.examples.append(f"{_name(source)}: {problem}")

    seen: dict[Source, Counter[Hashable]] = defaultdict(Counter)
    for topic, host, key in delivered:
        source = (topic, host)
        if source not in pending:
            if not ignore_other_sources:
                entry = report.sources.setdefault(_name(source), SourceReport())
                entry.delivered += 1
                entry.unexpected += 1
                note(source, "unexpected", f"{key!r} from a publisher nobody expected")
            continue
        entry = report.sources[_name(source)]
        entry.delivered += 1
        seen[source][key] += 1
        slots = pending[source].get(key)
        if slots is None:
            entry.unexpected += 1
            note(source, "unexpected", f"{key!r} was never published")
        elif not slots:
            entry.duplicated += 1
            note(source, "duplicated", f"{key!r} delivered {seen[source][key]} times")
        else:
            index = slots.popleft()
            if index < highest[source]:
                entry.out_of_order += 1
                note(source, "order", f"{key!r} (published #{index + 1}) after a later message")
            highest[source] = max(highest[source], index)
    for source, by_key in pending.items():
        left = sorted((i, key) for key, indexes in by_key.items() for i in indexes)
        report.sources[_name(source)].missing = len(left)
        for i, key in left[:EXAMPLES_PER_KIND]:
            note(source, "missing", f"{key!r} (published #{i + 1}) is missing")
    return report


KeyKind = Literal["id", "payload"]


def _key_kind(expected: Expected) -> KeyKind:
    for keys in expected.values():
        if keys:
            return "payload" if isinstance(keys[0], bytes | bytearray) else "id"
    return "id"


def read_delivery(
    directory: Path, key: KeyKind, position: Position | int = 0
) -> tuple[list[tuple[str, str, Hashable]], Position]:
    """(topic, host, id or payload) of every message of ``directory`` from ``position``,
    and the position after the last one."""
    out: list[tuple[str, str, Hashable]] = []
    end = Position.parse(position)
    for batch in Subscriber(directory).read_batches(position, follow=False):
        values: Sequence[Hashable] = batch.ids if key == "id" else batch.payloads
        out.extend(zip(itertools.repeat(batch.topic), itertools.repeat(batch.host), values))
        end = batch.next_position
    return out, end


# -- the end-of-test check ---------------------------------------------------------------

CORRUPTION_GRACE_S = 2.0  # a read error lasting this long is corruption, not a write in flight


@dataclass(slots=True)
class MergedReport:
    """The merged logs of several nodes: identical? every message once, in order?"""

    logs: LogComparison  # nodes first, then the copies
    delivery: DeliveryReport  # what the merged log of node ``read_from`` delivers
    settled: bool  # converged (identical and nothing missing) before the deadline
    waited_s: float
    error: str | None = None  # reading the log failed (corruption, ...)
    read_from: str = ""  # the node whose merged log was read: the first, or the longest

    @property
    def digests(self) -> dict[str, str]:
        return self.logs.digests

    @property
    def identical(self) -> bool:
        return self.logs.identical

    @property
    def missing(self) -> int:
        return self.delivery.missing

    @property
    def duplicated(self) -> int:
        return self.delivery.duplicated

    @property
    def out_of_order(self) -> int:
        return self.delivery.out_of_order

    @property
    def clean(self) -> bool:
        return self.error is None and self.logs.identical and self.delivery.clean

    def describe(self) -> str:
        """A few lines saying what is wrong (or that all is well)."""
        d = self.delivery
        lines = [
            f"merged logs {'identical' if self.identical else 'DIFFER'} after {self.waited_s:.1f}s"
            + ("" if self.settled else " (did not settle before the deadline)")
            + "; "
            + ", ".join(f"{n} {s} B {self.digests[n][:12]}" for n, s in self.logs.sizes.items()),
            f"published {d.published}, delivered {d.delivered} (read on {self.read_from}): "
            f"missing {d.missing}, "
            f"duplicated {d.duplicated}, out of order {d.out_of_order}, "
            f"unexpected {d.unexpected}",
        ]
        lines += [f"  {x}" for x in self.logs.differences]
        lines += [f"  {x}" for x in d.examples]
        if self.error is not None:
            lines.append(f"  reading failed: {self.error}")
        return "\n".join(lines)


def check_merged(
    dirs: Mapping[str, Path] | LocalStream,
    expected: Expected,
    *,
    timeout_s: float = 30.0,
    key: KeyKind | None = None,
    copies: Mapping[str, Path] | None = None,
    ignore_other_sources: bool = False,
    interval_s: float = 0.1,
) -> MergedReport:
    """Wait until the merged logs ``dirs`` ({node: directory}, or every node of a
    :class:`LocalStream`) and ``copies`` (e.g. subscriber hosts' copies) are
    byte-identical and deliver every message of ``expected``; then, or at
    ``timeout_s``, report.

    ``expected`` maps (topic, host) to the ids (``key="id"``) or payloads
    (``key="payload"``) in publish order; without ``key`` the type of the values
    says which. Publishing should have stopped: a log that keeps growing is
    checked as it is at the deadline.
    """
    if not isinstance(dirs, Mapping):
        dirs = dirs.merged_dirs()
    if not dirs:
        raise ValueError("check_merged needs at least one merged log")
    kind = key or _key_kind(expected)
    everything = {**dirs, **(copies or {})}
    first = next(iter(dirs.values()))
    start = time.monotonic()
    deadline = start + timeout_s
    delivered: list[tuple[str, str, Hashable]] = []
    read_to: Position | int = 0
    error: str | None = None
    error_since = 0.0
    settled = False
    while True:
        try:
            logs = compare_logs(everything)
            if first.is_dir():
                more, read_to = read_delivery(first, kind, read_to)
                delivered += more
            missing = count_delivery(delivered, expected, ignore_other_sources).missing
            # settled: identical, nothing missing, and nothing changed while reading
            settled = logs.identical and missing == 0 and compare_logs(everything) == logs
        except FileNotFoundError:  # a file pruned while reading: look again
            settled = False
        except RTError as exc:  # corruption, an invalid position: reported if it persists
            # a log still being written can show a write half done: read that part again;
            # corruption that stays for CORRUPTION_GRACE_S is reported, not waited out
            error = f"{type(exc).__name__}: {exc}"
            settled = False
            error_since = error_since or time.monotonic()
        else:
            error, error_since = None, 0.0
        lasting = error is not None and time.monotonic() - error_since >= CORRUPTION_GRACE_S
        if settled or lasting or time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    waited = time.monotonic() - start
    logs = _compare_settled(everything)
    read_from = next(iter(dirs))
    longest = max(dirs, key=lambda name: logs.sizes.get(name, 0))
    if not settled and error is None and logs.sizes.get(longest, 0) > logs.sizes.get(read_from, 0):
        # the first node is behind: count what the most advanced one holds instead
        try:
            delivered, _ = read_delivery(dirs[longest], kind)
            read_from = longest
        except (RTError, FileNotFoundError) as exc:
            error = f"reading {longest}: {type(exc).__name__}: {exc}"
    delivery = count_delivery(delivered, expected, ignore_other_sources)
    return MergedReport(logs, delivery, settled, waited, error, read_from)


def _compare_settled(dirs: Mapping[str, Path], attempts: int = 5) -> LogComparison:
    """:func:`compare_logs`, looking again if a file vanishes while it reads."""
    for _ in range(attempts - 1):
        try:
            return compare_logs(dirs)
        except FileNotFoundError:
            continue
    return compare_logs(dirs)


def assert_clean(report: MergedReport, context: str = "") -> None:
    """Fail with the report's description unless the logs are identical and every
    message was delivered once, in order. ``context`` (e.g. daemon logs) is appended."""
    if not report.clean:
        message = report.describe()
        raise AssertionError(message + (f"\n{context}" if context else ""))
