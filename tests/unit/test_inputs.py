"""What the sequencer counts as held of an input replica, on real files.

The push server owns the replica and cuts it on its start (a torn tail, damage) before
appending again; the sequencer reads the same file from another process and must never
count, or merge, bytes that are not whole records there now.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rt_appliance.log.format import FILE_KIND_PUBLISHER, encode_file_header, encode_record
from rt_appliance.position import Position
from rt_appliance.sequencer.inputs import InputDir

NAME = "t1.pub-1"


def _records(first_id: int, count: int, size: int = 12) -> list[bytes]:
    return [
        encode_record(bytes([i % 251]) * size, 1_000 + i, i)
        for i in range(first_id, first_id + count)
    ]


def _replica(tmp_path: Path, records: list[bytes]) -> tuple[InputDir, Path, int]:
    """An input directory with one file of ``records``; returns it, the file, the header end."""
    directory = tmp_path / "in" / NAME
    directory.mkdir(parents=True)
    header = encode_file_header(FILE_KIND_PUBLISHER, 1, 0, 0, "t1", "pub-1")
    path = directory / "log.1.0"
    path.write_bytes(header + b"".join(records))
    return InputDir(directory, sync=False), path, len(header)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _cut(path: Path, size: int) -> None:
    os.truncate(path, size)


def _end(d: InputDir) -> int:
    return d.extent().offset


def test_a_torn_tail_of_zeros_is_not_counted_as_held(tmp_path: Path) -> None:
    # after a power loss a file can end in a block that never reached the disk: zeros
    # the size of a record. A record of zeros has a plausible length (0) but no valid CRC
    records = _records(1, 5)
    d, path, header = _replica(tmp_path, records)
    _append(path, bytes(len(records[0])))
    assert _end(d) == header + sum(map(len, records))


def test_an_input_cut_and_written_again_is_walked_again_from_its_start(tmp_path: Path) -> None:
    # the chaos run of seed 4: the walk had counted a torn record's zeros as a 28-byte
    # record, the push server then cut them and wrote the real 40-byte record there, and
    # the walk resumed in the middle of it: the extent stuck there for good and the
    # leader never merged that input again
    records = _records(1, 5)
    d, path, header = _replica(tmp_path, records)
    boundary = header + sum(map(len, records))
    assert _end(d) == boundary
    _append(path, bytes(28))  # a record of zeros, walked by its length field only
    walked_zeros = _end(d)
    _cut(path, boundary)  # the push server's start: cut the torn tail ...
    more = _records(6, 10)
    _append(path, b"".join(more))  # ... and append what the publisher sends again
    assert walked_zeros >= boundary
    assert _end(d) == boundary + sum(map(len, more))
    _append(path, b"".join(_records(16, 3)))
    assert _end(d) == boundary + sum(map(len, more)) + 3 * len(more[0])


def test_a_cut_seen_while_it_is_short_moves_the_extent_back(tmp_path: Path) -> None:
    records = _records(1, 8)
    d, path, header = _replica(tmp_path, records)
    assert _end(d) == header + sum(map(len, records))
    kept = header + sum(map(len, records[:3]))
    _cut(path, kept)
    assert _end(d) == kept
    again = _records(4, 2, size=50)  # other sizes: the old boundaries mean nothing now
    _append(path, b"".join(again))
    assert _end(d) == kept + sum(map(len, again))


def test_a_file_replaced_under_the_same_name_is_walked_again(tmp_path: Path) -> None:
    records = _records(1, 6)
    d, path, header = _replica(tmp_path, records)
    assert _end(d) == header + sum(map(len, records))
    other = _records(1, 9, size=30)
    replacement = path.with_name("log.1.0.tmp")
    replacement.write_bytes(path.read_bytes()[:header] + b"".join(other))
    os.replace(replacement, path)
    assert _end(d) == header + sum(map(len, other))


def test_a_read_never_goes_past_its_limit(tmp_path: Path) -> None:
    # the planner reads up to what a majority holds; a limit inside a record must not
    # make it read the whole record, even when that record is larger than a range
    big = encode_record(b"x" * 5_000, 1, 1)
    d, _path, header = _replica(tmp_path, [big])
    start = Position.of(1, 0, header)
    assert d.read(start, Position.of(1, 0, header + 100), max_bytes=64) is None
    whole = d.read(start, Position.of(1, 0, header + len(big)), max_bytes=64)
    assert whole is not None and whole.data == big and whole.ids == [1]


def test_a_read_stops_at_the_last_whole_record_below_its_limit(tmp_path: Path) -> None:
    records = _records(1, 4)
    d, _path, header = _replica(tmp_path, records)
    size = len(records[0])
    start = Position.of(1, 0, header)
    got = d.read(start, Position.of(1, 0, header + 2 * size + 10), max_bytes=1 << 20)
    assert got is not None and got.data == records[0] + records[1] and got.ids == [1, 2]
    nothing = d.read(
        Position.of(1, 0, header + 2 * size), Position.of(1, 0, header + 2 * size + 10), 1 << 20
    )
    assert nothing is None


def test_unmerged_bytes_count_whole_records_only(tmp_path: Path) -> None:
    # rt status's lag_bytes (0: all merged): a newer file holding only its header, or
    # a torn tail, is nothing to merge
    records = _records(1, 5)
    d, path, header = _replica(tmp_path, records)
    end = header + sum(map(len, records))
    newer = path.with_name("log.2.0")
    newer.write_bytes(encode_file_header(FILE_KIND_PUBLISHER, 2, 0, 0, "t1", "pub-1"))
    assert d.unmerged_bytes(Position.of(1, 0, header)) == end - header
    assert d.unmerged_bytes(Position.of(1, 0, end)) == 0
    more = _records(6, 3)
    _append(newer, b"".join(more) + bytes(17))  # three records and a torn tail
    assert d.unmerged_bytes(Position.of(1, 0, end)) == sum(map(len, more))
    assert d.unmerged_bytes(Position.of(2, 0, header + len(more[0]))) == 2 * len(more[0])


def test_a_damaged_range_is_rewritten_in_place_and_read_whole_again(tmp_path: Path) -> None:
    records = _records(1, 50)
    inputs, path, start = _replica(tmp_path, records)
    good = path.read_bytes()
    end = len(good)
    assert inputs.extent() == Position.of(1, 0, end)
    damaged = bytearray(good)
    damaged[start + 100] ^= 0x10  # a flipped bit in the third record
    path.write_bytes(bytes(damaged))
    first = Position.of(1, 0, start)
    assert inputs.read_exact(first, Position.of(1, 0, end)) != good[start:]

    assert inputs.rewrite(first, good[start:end])
    assert path.read_bytes() == good
    assert inputs.read_exact(first, Position.of(1, 0, end)) == good[start:]


def test_a_rewrite_never_writes_past_the_end_of_the_copy(tmp_path: Path) -> None:
    records = _records(1, 10)
    inputs, path, start = _replica(tmp_path, records)
    good = path.read_bytes()
    more = b"".join(_records(11, 5))
    assert not inputs.rewrite(Position.of(1, 0, len(good) - 4), good[-4:] + more)
    assert path.read_bytes() == good  # the push server appends there, not a repair
    assert not inputs.rewrite(Position.of(1, 1, start), more)  # no such file


def test_in_the_node_process_the_newest_files_end_is_what_its_push_server_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the push server checked those records before writing them and synced them: the
    # planner reads up to there without walking the file again, and never past it
    records = _records(1, 4)
    plain, path, header = _replica(tmp_path, records)
    size = len(records[0])
    synced = Position.of(1, 0, header + 2 * size)
    d = InputDir(path.parent, sync=False, held=lambda name: synced if name == NAME else None)
    walks: list[int] = []
    real_walk = InputDir._valid_end
    monkeypatch.setattr(
        InputDir, "_valid_end", lambda self, f: walks.append(1) or real_walk(self, f)
    )
    start = Position.of(1, 0, header)
    got = d.read(start, Position.of(1, 0, header + 4 * size), max_bytes=1 << 20)
    assert got is not None and got.data == records[0] + records[1] and got.ids == [1, 2]
    assert walks == []
    # outside the node process (no push server to ask) the file is walked
    assert plain.read(start, Position.of(1, 0, header + 4 * size), 1 << 20) is not None
    assert walks == [1]
