"""Reading a merged log: range records announcing bytes copied verbatim from publisher logs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rt_appliance import (
    CorruptLogError,
    InvalidPositionError,
    Message,
    Position,
    Publisher,
    Subscriber,
)
from rt_appliance.log.format import FILE_KIND_MERGED, RECORD_HEADER, RangeHeader, encode_range
from rt_appliance.log.recovery import verify_directory
from rt_appliance.log.writer import LogWriter
from tests.helpers import payloads, read_all

pytestmark = pytest.mark.integration

SOURCES = [("quotes", "pub-1"), ("trades.dedup", "pub-2.example.com")]


def publisher_logs(root: Path) -> dict[tuple[str, str], list[Message]]:
    logs = {}
    for n, (topic, host) in enumerate(SOURCES):
        with Publisher(root / "pub", topic, host) as pub:
            for i in range(30):
                pub.publish(
                    b"%s-%d " % (topic.encode(), i) + b"p" * (i * 7 % 50),
                    id=i + 1,
                    timestamp_ns=1_000_000 * n + i,
                )
        logs[(topic, host)] = read_all(pub.directory)
    return logs


def record_bytes(source: list[Message], directory: Path, start: int, end: int) -> bytes:
    """The verbatim bytes of messages ``start..end-1`` of one publisher log file."""
    first, last = source[start], source[end - 1]
    path = directory / f"log.{first.position.session}.{first.position.roll}"
    data = path.read_bytes()
    return data[first.position.offset : last.next_position.offset]


def build_merged(root: Path) -> tuple[Path, list[tuple[str, str, list[Message]]]]:
    """A merged log of ranges alternating between the two sources, over two files."""
    logs = publisher_logs(root)
    merged = root / "merged"
    writer = LogWriter(merged, kind=FILE_KIND_MERGED, topic="stream", host="rt", roll_bytes=1 << 20)
    plan = [(0, 0, 5), (1, 0, 12), (0, 5, 6), (1, 12, 20), None, (0, 6, 30), (1, 20, 30)]
    ranges = []
    for seq, step in enumerate(plan):
        if step is None:
            with_roll = writer.roll
            writer._roll()  # the merger rolls between ranges
            assert writer.roll == with_roll + 1
            continue
        which, start, end = step
        topic, host = SOURCES[which]
        source = logs[(topic, host)]
        chunk = record_bytes(source, root / "pub" / f"{topic}.{host}", start, end)
        header = RangeHeader(topic, host, source[start].position, len(chunk), end - start)
        announce = encode_range(header, 5, seq)
        sizes = [len(announce)] + [RECORD_HEADER.size + len(m.payload) for m in source[start:end]]
        writer.append(announce + chunk, sizes)
        ranges.append((topic, host, source[start:end]))
    writer.close()
    return merged, ranges


def test_merged_log_reads_every_message_with_its_source(tmp_path: Path) -> None:
    merged, ranges = build_merged(tmp_path)
    expected = [(t, h, m.payload, m.id, m.timestamp_ns) for t, h, ms in ranges for m in ms]
    assert len(expected) == 60
    messages = read_all(merged)
    assert [(m.topic, m.host, m.payload, m.id, m.timestamp_ns) for m in messages] == expected
    assert all(a.position < b.position for a, b in itertools.pairwise(messages))
    assert {m.position.roll for m in messages} == {0, 1}
    reports = verify_directory(merged)
    assert [r.ok for r in reports] == [True, True]
    assert sum(r.records for r in reports) == 60  # message records; range records are not counted
    batches = list(Subscriber(merged).read_batches())
    assert [(b.topic, b.host, len(b)) for b in batches] == [(t, h, len(ms)) for t, h, ms in ranges]


def test_merged_log_resumes_anywhere_including_mid_range(tmp_path: Path) -> None:
    merged, _ranges = build_merged(tmp_path)
    messages = read_all(merged)
    for k, m in enumerate(messages):
        rest = read_all(merged, m.next_position)
        assert [(r.topic, r.host, r.payload) for r in rest] == [
            (r.topic, r.host, r.payload) for r in messages[k + 1 :]
        ]
        again = read_all(merged, m.position)
        assert payloads(again) == payloads(messages[k:])
    assert read_all(merged, Subscriber(merged).end_position()) == []


def test_merged_log_topic_filter(tmp_path: Path) -> None:
    merged, ranges = build_merged(tmp_path)
    quotes = read_all(merged, topics=["quotes"])
    assert payloads(quotes) == [m.payload for t, _, ms in ranges if t == "quotes" for m in ms]
    assert {m.host for m in quotes} == {"pub-1"}
    later = quotes[10]
    tail = read_all(merged, later.next_position, topics=["quotes"])
    assert payloads(tail) == payloads(quotes[11:])


def test_merged_log_refuses_positions_inside_range_records(tmp_path: Path) -> None:
    merged, _ = build_merged(tmp_path)
    messages = read_all(merged)
    first = messages[0]
    range_start = Position.of(first.position.session, first.position.roll, 0)
    header_bytes = messages[0].position.offset - _range_record_size("quotes", "pub-1")
    for inside in (1, 5, 27, 28, _range_record_size("quotes", "pub-1") - 1):
        with pytest.raises(InvalidPositionError):
            read_all(merged, range_start.with_offset(header_bytes + inside))
    assert payloads(read_all(merged, range_start.with_offset(header_bytes))) == payloads(messages)


def _range_record_size(topic: str, host: str) -> int:
    return len(encode_range(RangeHeader(topic, host, 0, 0, 0), 0, 0))


@pytest.mark.fault
def test_range_that_ends_inside_a_record_is_corruption(tmp_path: Path) -> None:
    logs = publisher_logs(tmp_path)
    topic, host = SOURCES[0]
    source = logs[(topic, host)]
    chunk = record_bytes(source, tmp_path / "pub" / f"{topic}.{host}", 0, 4)
    merged = tmp_path / "merged"
    writer = LogWriter(merged, kind=FILE_KIND_MERGED, topic="s", host="rt", roll_bytes=1 << 20)
    bad = encode_range(RangeHeader(topic, host, 0, len(chunk) - 3, 4), 0, 0)  # 3 bytes short
    writer.append(bad + chunk, [len(bad), len(chunk)])
    good = encode_range(RangeHeader(topic, host, 0, len(chunk), 4), 0, 1)
    writer.append(good + chunk, [len(good), len(chunk)])
    writer.close()
    got: list[Message] = []
    with pytest.raises(CorruptLogError, match="range ends inside a record"):
        got.extend(Subscriber(merged).read())
    assert payloads(got) == payloads(source[:3])
    assert verify_directory(merged)[0].error is not None
