"""Publisher and Subscriber together on real files: contents, positions, rules, errors."""

from __future__ import annotations

import os
import threading
from itertools import pairwise
from pathlib import Path

import pytest

from rt_appliance import (
    DedupIdError,
    InvalidPositionError,
    LogError,
    LogLockedError,
    Position,
    PositionPrunedError,
    Publisher,
    RecordTooLargeError,
    Subscriber,
    UsageError,
)
from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.segments import list_files
from tests.helpers import check_whole_log, payloads, read_all, snapshot

pytestmark = pytest.mark.integration


def stream_size(directory: Path) -> int:
    return sum(f.path.stat().st_size for f in list_files(directory))


def test_messages_round_trip_across_rolls_with_positions(tmp_path: Path) -> None:
    sent, returned = [], []
    with Publisher(tmp_path, "trades", "h1", roll_bytes=1024) as pub:
        for i in range(60):
            body = f"message {i}".encode() * (i % 5 + 1)
            returned.append(pub.publish(body, timestamp_ns=1000 + i, id=i))
            sent.append(body)
        batch = [f"b{i}".encode() for i in range(40)]
        last = pub.publish_batch(batch, timestamp_ns=7, ids=list(range(100, 140)))
        sent += batch
        directory = pub.directory
    assert directory == tmp_path / "trades.h1"
    assert len(list_files(directory)) > 3  # it rolled
    messages = read_all(directory)
    assert payloads(messages) == sent
    assert [m.id for m in messages] == list(range(60)) + list(range(100, 140))
    assert [m.timestamp_ns for m in messages] == [1000 + i for i in range(60)] + [7] * 40
    assert {(m.topic, m.host) for m in messages} == {("trades", "h1")}
    assert [m.position for m in messages[:60]] == returned
    assert messages[-1].position == last
    assert all(a.position < b.position for a, b in pairwise(messages))
    for m in messages:
        assert m.next_position > m.position
        if m.next_position.file_key == m.position.file_key:
            assert m.next_position.offset == m.position.offset + RECORD_HEADER.size + len(m.payload)
    check_whole_log(directory, sent)


def test_resuming_from_any_next_position_delivers_the_rest(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
        for i in range(50):
            pub.publish(b"%03d" % i * 10)
    messages = read_all(pub.directory)
    for k, m in enumerate(messages):
        rest = read_all(pub.directory, m.next_position)
        assert payloads(rest) == payloads(messages[k + 1 :])
        again = read_all(pub.directory, m.position)
        assert payloads(again) == payloads(messages[k:])


def test_position_zero_and_file_starts_read_from_the_beginning(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
        pub.publish_batch([b"x" * 100] * 20)
    messages = read_all(pub.directory)
    assert payloads(read_all(pub.directory, Position.ZERO)) == payloads(messages)
    assert payloads(read_all(pub.directory, 0)) == payloads(messages)
    second_file = list_files(pub.directory)[1]
    start = Position.of(second_file.session, second_file.roll, 0)
    from_second = [m for m in messages if m.position.file_key >= start.file_key]
    assert payloads(read_all(pub.directory, start)) == payloads(from_second)


def test_read_batches_gives_columns_and_bounded_sizes(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish_batch([b"%d" % i for i in range(1000)], timestamp_ns=5, ids=list(range(1000)))
    batches = list(Subscriber(pub.directory).read_batches(max_messages=64))
    assert [len(b) for b in batches] == [64] * 15 + [40]
    assert [p for b in batches for p in b.payloads] == [b"%d" % i for i in range(1000)]
    assert [i for b in batches for i in b.ids] == list(range(1000))
    for before, after in pairwise(batches):
        assert before.next_position == after.positions[0]
        assert list(before)[-1].next_position == after.positions[0]
    assert batches[-1].next_position == Subscriber(pub.directory).end_position()


def test_every_start_is_a_new_session_and_end_position_follows(tmp_path: Path) -> None:
    directory = tmp_path / "t.h"
    sent: list[bytes] = []
    ends = []
    for session in (1, 2, 3):
        with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
            assert pub.session == session
            for i in range(10):
                sent.append(b"s%d-%d" % (session, i) * 20)
                pub.publish(sent[-1])
            end = pub.position
        assert Subscriber(directory).end_position() == end
        ends.append(end)
    assert list_files(directory)[0].session == 1
    assert {f.session for f in list_files(directory)} == {1, 2, 3}
    assert (directory / ".session").read_text().strip() == "3"
    # a reader that stopped at the end of session 1 picks up session 2
    after_first = read_all(directory, ends[0])
    assert payloads(after_first) == sent[10:]
    assert read_all(directory, ends[-1]) == []
    check_whole_log(directory, sent)


def test_empty_and_missing_directories(tmp_path: Path) -> None:
    with pytest.raises(LogError):
        read_all(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    assert read_all(tmp_path / "empty") == []
    assert Subscriber(tmp_path / "empty").end_position() == Position.ZERO
    with pytest.raises(InvalidPositionError):
        read_all(tmp_path / "empty", Position.of(1, 0, 0))


def test_dedup_topic_requires_ids(tmp_path: Path) -> None:
    with Publisher(tmp_path, "q.dedup", "h") as pub:
        size = stream_size(pub.directory)
        with pytest.raises(DedupIdError):
            pub.publish(b"no id")
        with pytest.raises(DedupIdError):
            pub.publish_batch([b"a", b"b"])
        assert stream_size(pub.directory) == size
        pub.publish(b"first", id=10)
    assert [(m.payload, m.id) for m in read_all(pub.directory)] == [(b"first", 10)]


def test_dedup_ids_must_advance_by_one_in_absolute_value(tmp_path: Path) -> None:
    with Publisher(tmp_path, "q.dedup", "h") as pub:
        pub.publish(b"a", id=5)
        pub.publish(b"b", id=-6)  # a negative id is a retraction, KX style: abs() advances
        pub.publish_batch([b"c", b"d"], ids=[7, -8])
        size = stream_size(pub.directory)
        for bad in (8, 10, 0, -5, 6):
            with pytest.raises(DedupIdError):
                pub.publish(b"bad", id=bad)
        with pytest.raises(DedupIdError):
            pub.publish_batch([b"e", b"f", b"g"], ids=[9, 10, 12])  # one bad id: nothing
        with pytest.raises(DedupIdError):
            pub.publish_batch([b"e", b"f"], ids=[10, 11])  # does not follow -8
        assert stream_size(pub.directory) == size
        pub.publish_batch([b"e", b"f", b"g"], ids=[9, 10, 11])  # the rejected calls left no trace
        pub.publish(b"h", id=-12)
    got = [(m.payload, m.id) for m in read_all(pub.directory)]
    assert got == [
        (b"a", 5),
        (b"b", -6),
        (b"c", 7),
        (b"d", -8),
        (b"e", 9),
        (b"f", 10),
        (b"g", 11),
        (b"h", -12),
    ]


def test_non_dedup_topic_takes_any_ids(tmp_path: Path) -> None:
    with Publisher(tmp_path, "q", "h") as pub:
        pub.publish(b"a", id=5)
        pub.publish(b"b", id=5)
        pub.publish(b"c")
    assert [m.id for m in read_all(pub.directory)] == [5, 5, 0]


def test_topic_filter(tmp_path: Path) -> None:
    with Publisher(tmp_path, "quotes", "h") as pub:
        pub.publish_batch([b"1", b"2"])
    sub = Subscriber(pub.directory)
    assert payloads(sub.read(topics=["quotes"])) == [b"1", b"2"]
    assert payloads(sub.read(topics=["quotes", "trades"])) == [b"1", b"2"]
    assert list(sub.read(topics=["trades"])) == []
    assert list(sub.read(topics=[])) == []


def test_invalid_positions(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
        first = pub.publish(b"A" * 200)
        pub.publish_batch([b"B" * 200] * 8)
    sub = Subscriber(pub.directory)
    files = list_files(pub.directory)
    assert len(files) >= 2
    for inside in range(1, RECORD_HEADER.size + 200):  # every byte inside the first record
        with pytest.raises(InvalidPositionError):
            list(sub.read(first + inside))
    with pytest.raises(InvalidPositionError):
        list(sub.read(Position.of(1, 0, 3)))  # inside the file header
    size = files[0].path.stat().st_size
    with pytest.raises(InvalidPositionError):
        list(sub.read(Position.of(1, 0, size + 1)))  # past the end of the file
    with pytest.raises(InvalidPositionError):
        list(sub.read(Position.of(1, len(files) + 3, 0)))  # no such roll
    with pytest.raises(InvalidPositionError):
        list(sub.read(Position.of(9, 0, 0)))  # no such session
    with pytest.raises(InvalidPositionError):
        list(sub.read(-1))
    assert payloads(sub.read(first)) == [b"A" * 200] + [b"B" * 200] * 8


def test_pruned_positions(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
        pub.publish_batch([b"x" * 300] * 12)
    files = list_files(pub.directory)
    messages = read_all(pub.directory)
    in_first = [m for m in messages if m.position.file_key == files[0].key]
    files[0].path.unlink()
    sub = Subscriber(pub.directory)
    with pytest.raises(PositionPrunedError):
        list(sub.read(in_first[0].position))
    with pytest.raises(PositionPrunedError):
        list(sub.read(Position.of(1, 0, 0)))
    # position 0 still means "the oldest available"
    assert payloads(sub.read(0)) == payloads(messages[len(in_first) :])
    for f in list_files(pub.directory):  # everything pruned: the counter still knows
        f.path.unlink()
    with pytest.raises(PositionPrunedError):
        list(sub.read(messages[-1].position))
    with pytest.raises(InvalidPositionError):
        list(sub.read(Position.of(2, 0, 0)))  # a session never handed out
    assert list(sub.read(0)) == []


def test_a_closed_publisher_refuses_to_publish(tmp_path: Path) -> None:
    pub = Publisher(tmp_path, "t", "h")
    pub.publish(b"a")
    pub.close()
    pub.close()  # idempotent
    with pytest.raises(LogError):
        pub.publish(b"b")
    with pytest.raises(LogError):
        pub.publish_batch([b"b"])
    with pytest.raises(LogError):
        pub.flush()
    assert payloads(read_all(pub.directory)) == [b"a"]


def test_a_record_that_cannot_fit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
        pub.publish(b"ok")
        before = snapshot(pub.directory)
        with pytest.raises(RecordTooLargeError):
            pub.publish(b"x" * 1024)
        with pytest.raises(RecordTooLargeError):
            pub.publish_batch([b"small", b"x" * 2000])
        assert snapshot(pub.directory) == before
        pub.publish(b"still ok")
    assert payloads(read_all(pub.directory)) == [b"ok", b"still ok"]


def test_a_payload_over_the_limit_is_a_usage_error_before_anything_is_written(
    tmp_path: Path,
) -> None:
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish(b"ok")
        before = snapshot(pub.directory)
        for call in (
            lambda: pub.publish(bytes(MAX_PAYLOAD_BYTES + 1)),
            lambda: pub.publish_batch([b"small", bytes(MAX_PAYLOAD_BYTES + 1)]),
        ):
            with pytest.raises(UsageError, match=str(MAX_PAYLOAD_BYTES)):
                call()
            assert snapshot(pub.directory) == before
        pub.publish(bytes(MAX_PAYLOAD_BYTES))  # the limit itself is accepted
    assert [len(p) for p in payloads(read_all(pub.directory))] == [2, MAX_PAYLOAD_BYTES]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fsync": "sometimes"},
        {"on_full": "explode", "max_bytes": 1 << 20},
        {"roll_bytes": 100},
        {"roll_bytes": 4096, "max_bytes": 8191},
        {"fsync_interval_ms": 0},
        {"fsync_batch_messages": 0},
        {"roll_bytes": 4096, "max_bytes": 1 << 20, "block_timeout_s": -1},
    ],
)
def test_bad_options_are_usage_errors_and_leave_the_directory_free(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    with pytest.raises(UsageError):
        Publisher(tmp_path, "t", "h", **kwargs)  # type: ignore[arg-type]
    with Publisher(tmp_path, "t", "h") as pub:  # not locked by the failed attempt
        pub.publish(b"a")
    assert payloads(read_all(tmp_path / "t.h")) == [b"a"]


@pytest.mark.parametrize("topic,host", [("bad topic", "h"), ("t", "bad host"), ("t", "dedup.x")])
def test_bad_names_are_usage_errors(tmp_path: Path, topic: str, host: str) -> None:
    with pytest.raises(UsageError):
        Publisher(tmp_path, topic, host)
    assert os.listdir(tmp_path) == []


def test_second_writer_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish(b"a")
        before = snapshot(pub.directory)
        with pytest.raises(LogLockedError) as err:
            Publisher(tmp_path, "t", "h")
        assert str(os.getpid()) in str(err.value)
        assert err.value.retryable
        assert snapshot(pub.directory) == before
        pub.publish(b"b")
    with Publisher(tmp_path, "t", "h") as again:
        again.publish(b"c")
    check_whole_log(pub.directory, [b"a", b"b", b"c"])


@pytest.mark.parametrize("fsync", ["always", "batch", "interval", "never"])
def test_every_durability_mode_is_readable_before_close(tmp_path: Path, fsync: str) -> None:
    with Publisher(
        tmp_path,
        "t",
        "h",
        fsync=fsync,
        fsync_interval_ms=5,
        fsync_batch_messages=3,
        roll_bytes=2048,
    ) as pub:
        for i in range(30):
            pub.publish(b"m%d" % i * 10)
            assert read_all(pub.directory)[-1].payload == b"m%d" % i * 10
        pub.publish_batch([b"tail"] * 5)
        assert pub.flush() == pub.position
        assert len(read_all(pub.directory)) == 35
    check_whole_log(pub.directory, [b"m%d" % i * 10 for i in range(30)] + [b"tail"] * 5)


def test_publisher_is_thread_safe(tmp_path: Path) -> None:
    threads, per_thread = 6, 400
    pub = Publisher(tmp_path, "t", "h", roll_bytes=8192, fsync="never")
    positions: dict[int, list[Position]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        try:
            start.wait()
            got = []
            for i in range(per_thread):
                if i % 10 == 0:
                    got.append(pub.publish_batch([b"%d:%d" % (n, i), b"%d:%d+" % (n, i)]))
                else:
                    got.append(pub.publish(b"%d:%d" % (n, i)))
            positions[n] = got
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    pub.close()
    assert not errors
    messages = read_all(pub.directory)
    assert len(messages) == threads * (per_thread + per_thread // 10)
    assert len({m.position for m in messages}) == len(messages)
    for n in range(threads):
        mine = [m.payload for m in messages if m.payload.startswith(b"%d:" % n)]
        expected = []
        for i in range(per_thread):
            expected.append(b"%d:%d" % (n, i))
            if i % 10 == 0:
                expected.append(b"%d:%d+" % (n, i))
        assert mine == expected  # each thread's messages in its own order
        assert positions[n] == sorted(positions[n])
    check_whole_log(pub.directory, [m.payload for m in messages])


def test_position_in_session_zero_is_invalid_not_pruned(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h1") as pub:
        pub.publish(b"a")
    with pytest.raises(InvalidPositionError, match="sessions are numbered from 1"):
        list(Subscriber(tmp_path / "t.h1").read(Position(1)))
