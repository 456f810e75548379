"""The file reader on its own: live appends, chunk boundaries, and finding hidden records."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rt_appliance.log import reader as reader_module
from rt_appliance.log.format import FILE_KIND_PUBLISHER, encode_file_header, encode_record
from rt_appliance.log.reader import FileReader, find_valid_record
from rt_appliance.log.scan import Scan, Stop

pytestmark = pytest.mark.integration


def make_records(count: int, rng: random.Random, big: int = 0) -> list[bytes]:
    out = []
    for i in range(count):
        size = rng.choice([0, 1, 30, 200, 700]) if not big or i % 5 else big
        out.append(encode_record(rng.randbytes(size), i, i))
    return out


@pytest.mark.parametrize("chunk", [64, 300, 4 << 20])
@given(seed=st.integers(0, 2**32), limit=st.integers(1, 7))
def test_reader_sees_every_complete_record_once_while_the_file_grows(
    tmp_path_factory: pytest.TempPathFactory, chunk: int, seed: int, limit: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("r") / "log.1.0"
    header = encode_file_header(FILE_KIND_PUBLISHER, 1, 0, 0, "t", "h")
    records = make_records(25, rng)
    data = header + b"".join(records)
    ends = [len(header)]
    for r in records:
        ends.append(ends[-1] + len(r))
    path.write_bytes(header)
    old = reader_module.READ_CHUNK_BYTES
    reader_module.READ_CHUNK_BYTES = chunk
    try:
        got: list[int] = []
        with FileReader(path) as reader, open(path, "ab") as f:
            written = len(header)
            while written < len(data):
                step = rng.randint(1, 400)
                f.write(data[written : written + step])
                f.flush()
                written = min(len(data), written + step)
                while (block := reader.read_block(limit)) is not None:
                    assert len(block.records.offsets) <= limit
                    got.extend(block.records.offsets)
                    assert block.records.ids == [ends.index(o) for o in block.records.offsets]
                complete = [e for e in ends[:-1] if ends[ends.index(e) + 1] <= written]
                assert got == complete  # every complete record, once, in order; no partial one
                assert reader.tail is not None
                assert reader.tail.kind == ("clean" if written in ends else "incomplete")
                assert reader.tail.offset == ends[len(complete)]
    finally:
        reader_module.READ_CHUNK_BYTES = old


def test_records_larger_than_a_read_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader_module, "READ_CHUNK_BYTES", 1 << 16)
    rng = random.Random(3)
    path = tmp_path / "log.1.0"
    records = make_records(12, rng, big=200_000)
    header = encode_file_header(FILE_KIND_PUBLISHER, 1, 0, 0, "t", "h")
    path.write_bytes(header + b"".join(records))
    with FileReader(path) as reader:
        payloads = []
        while (block := reader.read_block(3)) is not None:
            payloads.extend(block.records.payloads)
        assert reader.tail is not None and reader.tail.kind == "clean"
    assert [len(p) for p in payloads] == [len(r) - 28 for r in records]
    assert payloads[0] == records[0][28:]


@pytest.mark.parametrize("chunk", [100, 4 << 20])
@given(seed=st.integers(0, 2**32), zeros=st.integers(0, 3000))
def test_find_valid_record_finds_a_record_hidden_in_garbage(
    tmp_path_factory: pytest.TempPathFactory, chunk: int, seed: int, zeros: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("f") / "blob"
    garbage = rng.randbytes(rng.randint(0, 2000)) + bytes(zeros) + rng.randbytes(rng.randint(0, 50))
    hidden = encode_record(rng.randbytes(rng.randint(0, 100)), 5, 6)
    at = len(garbage)
    path.write_bytes(garbage + hidden + rng.randbytes(rng.randint(0, 100)))
    old = reader_module.READ_CHUNK_BYTES
    reader_module.READ_CHUNK_BYTES = chunk
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            # (random bytes hold a valid record by chance with odds of about 2**-32 per try)
            assert find_valid_record(fd, 0, size) == at
            assert find_valid_record(fd, at, size) == at
            assert find_valid_record(fd, at + 1, size) is None  # after it: only noise
            assert find_valid_record(fd, 0, at + len(hidden) - 1) is None  # cut short: not valid
        finally:
            os.close(fd)
    finally:
        reader_module.READ_CHUNK_BYTES = old


def test_find_valid_record_in_zeros_and_noise_is_none(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(bytes(3_000_000) + random.Random(1).randbytes(200_000) + bytes(10))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert find_valid_record(fd, 0, os.fstat(fd).st_size) is None
    finally:
        os.close(fd)


def test_a_record_finished_while_it_was_read_is_no_corruption(tmp_path: Path) -> None:
    """A reader that will not wait (``strict_tail``) read a record cut short, and by the
    time it looked past it the writer had finished it and written more: that is the
    writer's progress, not a damaged record with valid ones after it."""
    rng = random.Random(7)
    path = tmp_path / "log.1.0"
    header = encode_file_header(FILE_KIND_PUBLISHER, 1, 0, 0, "t", "h")
    records = make_records(6, rng)
    path.write_bytes(header + b"".join(records))
    cut_short = records[0][: len(records[0]) // 2]  # what the first read of it saw
    with FileReader(path, len(header), strict_tail=True) as reader:
        tail = reader._classify(Scan(0, stop=Stop.BAD, reason="incomplete"), cut_short)
        assert (tail.offset, tail.kind) == (len(header), "incomplete")
        block = reader.read_block(100)  # the next read takes it, and the rest
        assert block is not None and len(block.records.offsets) == 6
