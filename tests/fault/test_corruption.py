"""Damaged stream files, one test per named failure (replayq's corruption scenarios).

Each ends with a whole-log check: what verifies, what reads back, what was kept.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from rt_appliance import CorruptLogError, LogError, Message, Publisher, Subscriber
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.recovery import verify_directory
from rt_appliance.log.segments import list_files
from tests.helpers import check_whole_log, flip_byte, payloads, read_all, snapshot

pytestmark = pytest.mark.fault

TOPIC, HOST = "orders", "pub-1"


def build_log(root: Path, count: int = 60, roll_bytes: int = 1024) -> tuple[Path, list[Message]]:
    """A publisher log of ``count`` numbered messages over several files."""
    with Publisher(root, TOPIC, HOST, roll_bytes=roll_bytes) as pub:
        for i in range(count):
            pub.publish(b"message %04d " % i + bytes(i % 40), id=i)
    messages = read_all(pub.directory)
    assert len(messages) == count
    return pub.directory, messages


def in_file(messages: list[Message], key: tuple[int, int]) -> list[Message]:
    return [m for m in messages if m.position.file_key == key]


def expect_corruption_at(directory: Path, damaged: Message, before: list[Message]) -> None:
    """Reading stops with an error naming the file and offset, after the good messages."""
    got: list[Message] = []
    with pytest.raises(CorruptLogError) as err:
        for m in Subscriber(directory).read():
            got.append(m)
    assert err.value.path == str(
        directory / f"log.{damaged.position.session}.{damaged.position.roll}"
    )
    assert err.value.offset == damaged.position.offset
    assert f"offset {damaged.position.offset}" in str(err.value)
    assert payloads(got) == payloads(before)
    reports = verify_directory(directory)
    bad = [r for r in reports if r.error is not None]
    assert [r.path.name for r in bad] == [f"log.{damaged.position.session}.{damaged.position.roll}"]
    assert bad[0].error is not None and bad[0].error.offset == damaged.position.offset
    assert bad[0].valid_bytes == damaged.position.offset
    assert bad[0].records == len(
        [m for m in before if m.position.file_key == damaged.position.file_key]
    )


def test_corrupt_record_in_the_first_file(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    files = list_files(directory)
    assert len(files) >= 3
    first = in_file(messages, files[0].key)
    victim = first[len(first) // 2]
    flip_byte(files[0].path, victim.position.offset + RECORD_HEADER.size + 3)
    expect_corruption_at(directory, victim, messages[: messages.index(victim)])
    # a writer only repairs the last file: it starts, and the damage stays reported
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        assert pub.recovery is None
        pub.publish(b"after")
    expect_corruption_at(directory, victim, messages[: messages.index(victim)])


def test_corrupt_record_in_a_middle_file(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    files = list_files(directory)
    middle = in_file(messages, files[1].key)
    victim = middle[-1]  # the last record of a rolled file: a "torn tail" there is corruption
    flip_byte(files[1].path, victim.position.offset)  # its CRC
    expect_corruption_at(directory, victim, messages[: messages.index(victim)])
    # reading from a position after the damage works
    after = messages[messages.index(victim) + 1]
    assert payloads(read_all(directory, after.position)) == payloads(
        messages[messages.index(victim) + 1 :]
    )


def test_truncated_middle_file(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    files = list_files(directory)
    middle = in_file(messages, files[1].key)
    victim = middle[-1]
    os.truncate(files[1].path, victim.position.offset + 10)
    expect_corruption_at(directory, victim, messages[: messages.index(victim)])


@pytest.mark.parametrize(
    "field,at",
    [
        ("crc", 1),
        ("length low byte", 4),
        ("length high byte", 7),
        ("kind", 8),
        ("flags", 9),
        ("timestamp", 15),
        ("id", 20),
        ("payload", RECORD_HEADER.size + 2),
    ],
)
def test_corrupt_record_followed_by_valid_records_in_the_last_file(
    tmp_path: Path, field: str, at: int
) -> None:
    directory, messages = build_log(tmp_path)
    last_file = list_files(directory)[-1]
    last = in_file(messages, last_file.key)
    assert len(last) >= 3
    victim = last[1]
    flip_byte(last_file.path, victim.position.offset + at, 0x40 if "length" in field else 0x01)
    before = snapshot(directory)
    with pytest.raises(CorruptLogError) as err:
        Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024)
    assert err.value.path == str(last_file.path)
    assert err.value.offset == victim.position.offset
    assert snapshot(directory) == before  # nothing modified, no session taken
    expect_corruption_at(directory, victim, messages[: messages.index(victim)])
    with pytest.raises(CorruptLogError):  # and it stays refused
        Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024)
    assert snapshot(directory) == before


def test_garbage_appended_after_valid_records(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    last_file = list_files(directory)[-1]
    valid_end = last_file.path.stat().st_size
    garbage = random.Random(7).randbytes(333)
    with open(last_file.path, "ab") as f:
        f.write(garbage)
    assert payloads(read_all(directory)) == payloads(messages)  # readers stop at the valid end
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        report = pub.recovery
        assert report is not None
        assert (report.path, report.offset, report.lost_bytes) == (last_file.path, valid_end, 333)
        assert report.lost_records >= 1 and not report.removed_file
        assert pub.session == 2
        pub.publish_batch([b"new 1", b"new 2"])
    assert last_file.path.stat().st_size == valid_end
    check_whole_log(directory, [*payloads(messages), b"new 1", b"new 2"])


def test_zeros_after_valid_records(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    last_file = list_files(directory)[-1]
    valid_end = last_file.path.stat().st_size
    os.truncate(last_file.path, valid_end + 100_000)  # a hole: blocks never written
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        assert pub.recovery is not None and pub.recovery.lost_bytes == 100_000
        pub.publish(b"new")
    check_whole_log(directory, [*payloads(messages), b"new"])


def test_torn_header_in_the_last_file(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        pub.publish(b"doomed")
        torn = pub._writer.current.path
    header_bytes = read_all(directory)[-1].position.offset
    os.truncate(torn, header_bytes - 5)  # shorter than its header
    with pytest.raises(CorruptLogError) as err:  # a reader reports it; the writer repairs it
        read_all(directory)
    assert (err.value.path, err.value.offset) == (str(torn), 0)
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        report = pub.recovery
        assert report is not None and report.removed_file and report.path == torn
        assert report.lost_bytes == header_bytes - 5
        assert not torn.exists()
        assert pub.session == 3
        pub.publish(b"new")
    check_whole_log(directory, [*payloads(messages), b"new"])


def test_empty_last_file(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    (directory / "log.2.0").write_bytes(b"")
    with pytest.raises(CorruptLogError):  # a reader cannot use it
        read_all(directory)
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        assert pub.recovery is not None and pub.recovery.removed_file
        assert pub.session == 3  # the .session counter said 1, the file said 2
        pub.publish(b"new")
    check_whole_log(directory, [*payloads(messages), b"new"])


def test_damaged_complete_header_in_the_last_file_is_refused(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    last_file = list_files(directory)[-1]
    flip_byte(last_file.path, 13)  # session field: the header CRC fails, records follow
    before = snapshot(directory)
    with pytest.raises(CorruptLogError) as err:
        Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024)
    assert (err.value.path, err.value.offset) == (str(last_file.path), 0)
    assert snapshot(directory) == before
    reports = verify_directory(directory)
    assert [r.error is not None for r in reports] == [False] * (len(reports) - 1) + [True]
    assert sum(r.records for r in reports[:-1]) == len(messages) - len(
        in_file(messages, last_file.key)
    )


def test_bad_crc_on_the_last_record(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    last_file = list_files(directory)[-1]
    victim = messages[-1]
    size = last_file.path.stat().st_size
    flip_byte(last_file.path, size - 1)  # last payload byte
    assert payloads(read_all(directory)) == payloads(messages[:-1])
    reports = verify_directory(directory)
    assert reports[-1].error is None and reports[-1].tail.kind == "torn"
    assert reports[-1].valid_bytes == victim.position.offset
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        report = pub.recovery
        assert report is not None
        assert report.lost_records == 1
        assert report.offset == victim.position.offset
        assert report.lost_bytes == size - victim.position.offset
        assert "CRC" in report.reason
        pub.publish_batch([b"after 1", b"after 2"])
    check_whole_log(directory, [*payloads(messages[:-1]), b"after 1", b"after 2"])


def test_record_torn_mid_write(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    last_file = list_files(directory)[-1]
    victim = messages[-1]
    os.truncate(last_file.path, victim.position.offset + RECORD_HEADER.size + 1)
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        assert pub.recovery is not None
        assert (pub.recovery.lost_records, pub.recovery.lost_bytes) == (1, RECORD_HEADER.size + 1)
        assert pub.recovery.reason == "incomplete"
    check_whole_log(directory, payloads(messages[:-1]))


def test_leftover_temporary_file_from_a_crash_during_file_creation(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    leftover = directory / ".log.1.9.new"
    leftover.write_bytes(b"\x89RTLOG\r\n partial")
    assert payloads(read_all(directory)) == payloads(messages)  # readers ignore it
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        assert pub.recovery is None
        assert not leftover.exists()
        pub.publish(b"new")
    check_whole_log(directory, [*payloads(messages), b"new"])


def test_lost_session_counter(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    (directory / ".session").unlink()
    with Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024) as pub:
        assert pub.session == 2  # taken from the files: positions are never reused
        pub.publish(b"new")
    check_whole_log(directory, [*payloads(messages), b"new"])


def test_garbled_session_counter(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    (directory / ".session").write_text("not a number\n")
    before = snapshot(directory)
    with pytest.raises(LogError, match=r"\.session"):
        Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024)
    assert snapshot(directory) == before
    check_whole_log(directory, payloads(messages))


def test_session_numbers_used_up(tmp_path: Path) -> None:
    directory, messages = build_log(tmp_path)
    from rt_appliance.limits import MAX_SESSION

    (directory / ".session").write_text(f"{MAX_SESSION}\n")
    before = snapshot(directory)
    with pytest.raises(LogError, match="session numbers"):
        Publisher(tmp_path, TOPIC, HOST, roll_bytes=1024)
    assert snapshot(directory) == before
    check_whole_log(directory, payloads(messages))
