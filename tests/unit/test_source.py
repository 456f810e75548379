"""DirectorySource: whole-record chunks, and CRC checks shared between sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_appliance import Position, Publisher
from rt_appliance.errors import CorruptLogError
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.replicate.source import Chunk, DirectorySource

pytestmark = pytest.mark.unit


def fill(root: Path, messages: int = 3000, roll_bytes: int = 64 << 10) -> Path:
    with Publisher(root, "t", "h1", fsync="never", roll_bytes=roll_bytes) as pub:
        pub.publish_batch([b"message %05d" % i for i in range(messages)])
    return root / "t.h1"


def chunks(source: DirectorySource) -> list[Chunk]:
    out = []
    while (chunk := source.read()) is not None:
        out.append(chunk)
    return out


def test_sharing_checks_changes_nothing_that_is_sent(tmp_path: Path) -> None:
    directory = fill(tmp_path)
    alone = chunks(DirectorySource(directory, Position.ZERO, 16 << 10))
    shared: dict[tuple[int, int], int] = {}
    first = chunks(DirectorySource(directory, Position.ZERO, 16 << 10, shared))
    second = chunks(DirectorySource(directory, Position.ZERO, 16 << 10, shared))
    assert first == alone and second == alone
    assert sum(c.records for c in alone) == 3000
    files = sorted(directory.glob("log.*"))
    assert b"".join(c.data for c in alone if c.position.file_key == (1, 0)) == files[0].read_bytes()
    assert shared[(1, 0)] == files[0].stat().st_size  # every byte of the first file checked


def test_torn_tail_ends_the_chunks_without_an_error(tmp_path: Path) -> None:
    directory = fill(tmp_path, messages=100, roll_bytes=1 << 20)
    last = directory / "log.1.0"
    data = bytearray(last.read_bytes())
    data[-3] ^= 0xFF  # the last record's payload: a bad CRC with nothing after it
    last.write_bytes(bytes(data))
    for shared in (None, {}):
        sent = chunks(DirectorySource(directory, Position.ZERO, 1 << 20, shared))
        assert sum(c.records for c in sent) == 99
        assert b"".join(c.data for c in sent) == bytes(data[: -(RECORD_HEADER.size + 13)])


def test_corruption_before_valid_records_is_an_error_either_way(tmp_path: Path) -> None:
    directory = fill(tmp_path, messages=100, roll_bytes=1 << 20)
    last = directory / "log.1.0"
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    last.write_bytes(bytes(data))
    for shared in (None, {}):
        with pytest.raises(CorruptLogError, match="a valid record follows"):
            chunks(DirectorySource(directory, Position.ZERO, 1 << 20, shared))


def test_a_file_cut_below_what_was_sent_is_an_error_not_a_skip(tmp_path: Path) -> None:
    """A source that has sent a file up to its end, when the file is then cut (damage on
    the serving node) and a later file exists, must not move on to the later file: the
    cut part would never be sent. It raises, and the receiver goes to another node."""
    directory = fill(tmp_path, messages=3000, roll_bytes=64 << 10)
    files = sorted(directory.glob("log.*"), key=lambda p: int(p.name.split(".")[-1]))
    first = files[0]
    source = DirectorySource(directory, Position.ZERO, 1 << 20)
    sent = source.read()
    assert sent is not None and sent.next_position.offset == first.stat().st_size
    with open(first, "r+b") as f:
        f.truncate(first.stat().st_size // 2)
    with pytest.raises(CorruptLogError, match="shorter than offset"):
        source.read()
