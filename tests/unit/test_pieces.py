"""Records larger than a chunk travel in pieces: DirectorySource sends them, ReplicaDir takes them.

A chunk limit of a few hundred bytes stands in for the frame limit, so every size
class (empty, smaller than a chunk, exactly one, a little more, many chunks) is cheap.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rt_appliance import Position, Publisher
from rt_appliance.errors import CorruptLogError, LogError
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.replicate.sink import ReplicaDir
from rt_appliance.replicate.source import Chunk, DirectorySource
from rt_appliance.subscribe import Subscriber

pytestmark = pytest.mark.unit

LIMIT = 512  # bytes per chunk


def payload(i: int, size: int) -> bytes:
    return random.Random(i).randbytes(size)


def publish(root: Path, sizes: list[int], first: int = 0, roll_bytes: int = 4096) -> None:
    with Publisher(root, "t", "h1", fsync="never", roll_bytes=roll_bytes) as pub:
        for i, size in enumerate(sizes, start=first):
            pub.publish(payload(i, size), id=i)


def send_all(source: DirectorySource, replica: ReplicaDir) -> list[Chunk]:
    sent = []
    while (chunk := source.read()) is not None:
        assert len(chunk.data) <= LIMIT + 512  # a file header or range record may ride along
        replica.append(chunk.position, chunk.data)
        sent.append(chunk)
    return sent


def same_files(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.glob("log.*"))
    assert names == sorted(p.name for p in b.glob("log.*"))
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def delivered(directory: Path) -> list[tuple[int, bytes]]:
    return [(m.id, m.payload) for m in Subscriber(directory).read()]


SIZES = [0, 1, LIMIT - RECORD_HEADER.size - 1, LIMIT - RECORD_HEADER.size, LIMIT, LIMIT + 1]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(
            st.one_of(st.sampled_from(SIZES), st.integers(0, 6 * LIMIT)), min_size=1, max_size=8
        ),
        min_size=1,
        max_size=4,
    ),
    shared=st.booleans(),
)
def test_any_sizes_arrive_byte_identical(tmp_path_factory, batches, shared) -> None:  # type: ignore[no-untyped-def]
    root, copy = tmp_path_factory.mktemp("pub"), tmp_path_factory.mktemp("copy")
    replica = ReplicaDir(copy / "t.h1", fsync=False)
    source = DirectorySource(root / "t.h1", Position.ZERO, LIMIT, {} if shared else None)
    expected: list[tuple[int, bytes]] = []
    try:
        for batch in batches:  # publish, send what is there, publish more (a new session)
            publish(root, batch, first=len(expected))
            expected += [(i, payload(i, n)) for i, n in enumerate(batch, start=len(expected))]
            send_all(source, replica)
            assert replica.receiving_bytes == 0
    finally:
        source.close()
        replica.close()
    same_files(root / "t.h1", copy / "t.h1")
    assert delivered(copy / "t.h1") == expected


def test_a_large_record_goes_out_in_pieces_of_the_limit(tmp_path: Path) -> None:
    publish(tmp_path, [10, 5 * LIMIT, 10], roll_bytes=1 << 20)
    with DirectorySource(tmp_path / "t.h1", Position.ZERO, LIMIT) as source:
        sent = []
        while (chunk := source.read()) is not None:
            sent.append(chunk)
    data = (tmp_path / "t.h1" / "log.1.0").read_bytes()
    assert b"".join(c.data for c in sent) == data
    assert all(a.next_position == b.position for a, b in itertools.pairwise(sent))
    assert sum(c.records for c in sent) == 3
    middle = [c for c in sent if c.records == 0]  # pieces that end inside the large record
    assert len(middle) >= 4 and all(len(c.data) == LIMIT for c in middle)


def test_reconnecting_mid_record_starts_it_again_and_loses_nothing(tmp_path: Path) -> None:
    publish(tmp_path / "pub", [3, 7 * LIMIT, 4, 3 * LIMIT])
    directory, copy = tmp_path / "pub" / "t.h1", tmp_path / "copy"
    replica = ReplicaDir(copy, fsync=False)
    with DirectorySource(directory, Position.ZERO, LIMIT) as source:
        for _ in range(4):  # the small record, then three pieces of the large one
            chunk = source.read()
            assert chunk is not None
            replica.append(chunk.position, chunk.data)
    assert replica.receiving_bytes > 0
    end = replica.end  # still before the large record: that is what is acked
    assert (copy / "log.1.0").stat().st_size > end.offset
    with DirectorySource(directory, end, LIMIT) as again:  # the sender resumes at the end
        send_all(again, replica)
    replica.close()
    same_files(directory, copy)


def test_restart_mid_record_cuts_the_pieces_as_a_torn_tail(tmp_path: Path) -> None:
    publish(tmp_path / "pub", [5 * LIMIT])
    directory, copy = tmp_path / "pub" / "t.h1", tmp_path / "copy"
    replica = ReplicaDir(copy, fsync=False)
    with DirectorySource(directory, Position.ZERO, LIMIT) as source:
        for _ in range(2):
            chunk = source.read()
            assert chunk is not None
            replica.append(chunk.position, chunk.data)
    replica.close()  # the receiver dies with half a record on disk
    reopened = ReplicaDir(copy, fsync=False)
    assert reopened.recovery is not None and reopened.recovery.lost_bytes > 0
    with DirectorySource(directory, reopened.end, LIMIT) as source:
        send_all(source, reopened)
    reopened.close()
    same_files(directory, copy)


def test_a_piece_with_a_flipped_byte_is_refused_and_cut(tmp_path: Path) -> None:
    publish(tmp_path / "pub", [2, 4 * LIMIT])
    directory, copy = tmp_path / "pub" / "t.h1", tmp_path / "copy"
    replica = ReplicaDir(copy, fsync=False)
    with DirectorySource(directory, Position.ZERO, LIMIT) as source:
        chunks = []
        while (chunk := source.read()) is not None:
            chunks.append(chunk)
    for chunk in chunks[:-1]:
        replica.append(chunk.position, chunk.data)
    before = replica.end
    last = bytearray(chunks[-1].data)
    last[len(last) // 2] ^= 1
    with pytest.raises(CorruptLogError, match="CRC mismatch"):
        replica.append(chunks[-1].position, bytes(last))
    assert replica.end == before and (copy / "log.1.0").stat().st_size == before.offset
    with DirectorySource(directory, before, LIMIT) as source:  # sent again, it is taken
        send_all(source, replica)
    replica.close()
    same_files(directory, copy)


def test_pieces_that_do_not_follow_or_run_past_the_record_are_refused(tmp_path: Path) -> None:
    publish(tmp_path / "pub", [4 * LIMIT])
    directory = tmp_path / "pub" / "t.h1"
    with DirectorySource(directory, Position.ZERO, LIMIT) as source:
        first, second = source.read(), source.read()
    assert first is not None and second is not None
    replica = ReplicaDir(tmp_path / "copy", fsync=False)
    replica.append(first.position, first.data)
    with pytest.raises(CorruptLogError, match="ends at"):  # a gap: not the next piece
        replica.append(second.next_position, second.data)
    with DirectorySource(directory, replica.end, LIMIT) as again:  # the record starts again
        piece, next_piece = again.read(), again.read()
    assert piece is not None and next_piece is not None
    replica.append(piece.position, piece.data)
    assert replica.receiving_bytes == len(piece.data)
    with pytest.raises(CorruptLogError, match="runs past"):
        replica.append(next_piece.position, next_piece.data + bytes(5 * LIMIT))
    assert replica.receiving_bytes == 0
    assert (tmp_path / "copy" / "log.1.0").stat().st_size == replica.end.offset
    replica.close()


def test_a_chunk_cut_inside_a_record_header_is_refused(tmp_path: Path) -> None:
    publish(tmp_path / "pub", [10, 10])
    data = (tmp_path / "pub" / "t.h1" / "log.1.0").read_bytes()
    replica = ReplicaDir(tmp_path / "copy", fsync=False)
    with pytest.raises(LogError, match="inside a record header"):
        replica.append(Position.of(1, 0, 0), data[: -(RECORD_HEADER.size + 10) + 5])
    assert not (tmp_path / "copy" / "log.1.0").exists()
    replica.close()


def test_a_huge_length_in_a_first_piece_is_refused(tmp_path: Path) -> None:
    publish(tmp_path / "pub", [10])
    data = bytearray((tmp_path / "pub" / "t.h1" / "log.1.0").read_bytes())
    start = len(data) - RECORD_HEADER.size - 10
    data[start + 4 : start + 8] = (1 << 31).to_bytes(4, "little")
    replica = ReplicaDir(tmp_path / "copy", fsync=False)
    with pytest.raises(CorruptLogError):
        replica.append(Position.of(1, 0, 0), bytes(data))
    assert replica.end == Position.ZERO
    replica.close()
    assert not (tmp_path / "copy" / "log.1.0").exists()
