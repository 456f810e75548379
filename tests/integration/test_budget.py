"""The publisher's disk budget (max_bytes) and its three policies when it is used up."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from rt_appliance import (
    LogFullError,
    Position,
    PositionPrunedError,
    Publisher,
    Subscriber,
    UsageError,
)
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.segments import list_files
from tests.helpers import check_whole_log, payloads, read_all, snapshot

pytestmark = pytest.mark.integration

ROLL, MAX = 1024, 4096


def used(directory: Path) -> int:
    return sum(f.path.stat().st_size for f in list_files(directory))


def fill(pub: Publisher, sent: list[bytes]) -> None:
    """Publish 100-byte messages until the budget refuses one (policy ``error``)."""
    with pytest.raises(LogFullError):
        while True:
            body = b"%04d" % len(sent) + b"f" * 96
            pub.publish(body)
            sent.append(body)
            assert used(pub.directory) <= MAX
            assert len(sent) < 1000, "the budget never filled"


def test_max_bytes_below_twice_roll_bytes_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="twice"):
        Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=2 * ROLL - 1)
    with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=2 * ROLL) as pub:
        pub.publish(b"ok")
    assert payloads(read_all(pub.directory)) == [b"ok"]


def test_error_policy(tmp_path: Path) -> None:
    sent: list[bytes] = []
    with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=MAX, on_full="error") as pub:
        fill(pub, sent)
        before = snapshot(pub.directory)
        assert MAX - used(pub.directory) < RECORD_HEADER.size + 100 + 60  # it really is full
        with pytest.raises(LogFullError) as err:
            pub.publish(b"x" * 100)
        assert err.value.retryable
        with pytest.raises(LogFullError):
            pub.publish_batch([b"y"] * 3)
        assert snapshot(pub.directory) == before  # nothing written for those calls
        assert payloads(read_all(pub.directory)) == sent  # earlier messages intact
        small = MAX - used(pub.directory) - RECORD_HEADER.size
        if small >= 0 and pub.position.offset + RECORD_HEADER.size + small < ROLL:
            pub.publish(b"s" * small)  # exactly what is left still fits
            sent.append(b"s" * small)
            assert used(pub.directory) == MAX
        # space freed by someone else (the push client deleting a replicated file)
        oldest = list_files(pub.directory)[0]
        gone = [m for m in read_all(pub.directory) if m.position.file_key == oldest.key]
        oldest.path.unlink()
        pub.publish(b"after space was freed")
        sent = [*sent[len(gone) :], b"after space was freed"]
    assert used(pub.directory) <= MAX
    check_whole_log(pub.directory, sent)


def test_drop_oldest_policy(tmp_path: Path) -> None:
    sent: list[bytes] = []
    positions: list[Position] = []
    with Publisher(
        tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=MAX, on_full="drop_oldest"
    ) as pub:
        header_bytes = pub.position.offset
        for i in range(200):
            sent.append(b"%04d" % i + b"d" * (i % 150))
            if i % 3:
                positions.append(pub.publish(sent[-1]))
            else:
                positions.append(pub.publish_batch([sent[-1]]))
            assert used(pub.directory) <= MAX
            assert pub._writer.current.path.exists()  # the file being written is never dropped
        drops = pub.drops
    files = list_files(pub.directory)
    assert [f.roll for f in files] == list(range(files[0].roll, files[-1].roll + 1))
    assert drops.files == files[0].roll  # log.1.0 .. log.1.(first-1) were dropped
    readable = read_all(pub.directory)
    kept = len(readable)
    assert payloads(readable) == sent[-kept:]  # the newest messages, in order
    assert drops.records == len(sent) - kept
    dropped = sent[: len(sent) - kept]
    assert (
        drops.bytes
        == sum(RECORD_HEADER.size + len(b) for b in dropped) + drops.files * header_bytes
    )
    with pytest.raises(PositionPrunedError):
        list(pub_subscriber(pub).read(positions[0]))
    with pytest.raises(PositionPrunedError):
        list(pub_subscriber(pub).read(positions[len(dropped) - 1]))
    assert payloads(pub_subscriber(pub).read(positions[len(dropped)])) == sent[len(dropped) :]
    check_whole_log(pub.directory, sent[len(dropped) :])


def pub_subscriber(pub: Publisher) -> Subscriber:
    return Subscriber(pub.directory)


class _Blocked(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "blocking until space is freed" in record.getMessage():
            self.event.set()


def test_block_policy_waits_for_space(tmp_path: Path) -> None:
    sent: list[bytes] = []
    with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=MAX, on_full="error") as pub:
        fill(pub, sent)
    blocked = _Blocked()
    logger = logging.getLogger("rt_appliance.publish.budget")
    logger.addHandler(blocked)
    done = threading.Event()
    errors: list[BaseException] = []
    try:
        with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=MAX) as pub:  # block
            full = snapshot(pub.directory)

            def publish() -> None:
                try:
                    pub.publish(b"waited for space" + b"w" * 600)
                except BaseException as exc:
                    errors.append(exc)
                finally:
                    done.set()

            worker = threading.Thread(target=publish)
            worker.start()
            assert blocked.event.wait(timeout=10), "the publisher never blocked"
            assert not done.is_set()
            assert snapshot(pub.directory) == full  # nothing written while blocked
            oldest = list_files(pub.directory)[0]
            gone = [m for m in read_all(pub.directory) if m.position.file_key == oldest.key]
            oldest.path.unlink()  # what the push client does once every node has the file
            assert done.wait(timeout=10)
            worker.join(timeout=10)
            assert not errors
            assert used(pub.directory) <= MAX
    finally:
        logger.removeHandler(blocked)
    expected = [*sent[len(gone) :], b"waited for space" + b"w" * 600]
    check_whole_log(pub.directory, expected)


def test_block_policy_times_out(tmp_path: Path) -> None:
    sent: list[bytes] = []
    with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=MAX, on_full="error") as pub:
        fill(pub, sent)
    with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=MAX, block_timeout_s=0.2) as pub:
        before = snapshot(pub.directory)
        with pytest.raises(LogFullError, match=r"0\.2s"):
            pub.publish_batch([b"x" * 300] * 3)
        assert snapshot(pub.directory) == before
    check_whole_log(pub.directory, sent)


def test_block_policy_does_not_block_while_space_remains(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=ROLL, max_bytes=64 * ROLL) as pub:
        for i in range(100):
            pub.publish(b"%d" % i * 20)
        assert len(list_files(pub.directory)) > 3
    assert payloads(read_all(pub.directory)) == [b"%d" % i * 20 for i in range(100)]


def test_a_refused_dedup_message_does_not_use_up_its_id(tmp_path: Path) -> None:
    with Publisher(
        tmp_path, "q.dedup", "h", roll_bytes=ROLL, max_bytes=MAX, on_full="error"
    ) as pub:
        next_id = 1
        with pytest.raises(LogFullError):
            while True:
                pub.publish(b"m" * 100, id=next_id)
                next_id += 1
        with pytest.raises(LogFullError):
            pub.publish_batch([b"b" * 100] * 2, ids=[next_id, next_id + 1])
        list_files(pub.directory)[0].path.unlink()  # space freed
        pub.publish(b"the same id again", id=next_id)  # the refused calls did not take it
    last = read_all(pub.directory)[-1]
    assert (last.payload, last.id) == (b"the same id again", next_id)
