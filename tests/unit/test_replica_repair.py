"""A copy (a node's input replica, a subscriber's copy) found damaged when it is opened is
repaired: the damaged file is kept under ``.damaged/``, cut before the damage, and the
sender resends the rest, so replication never stops for good on bit rot. Found by
``rt chaos`` (seed 11: a zeroed block in ``in/t2.pub-2`` of a node that was restarted
refused every push afterwards)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.errors import CorruptLogError
from rt_appliance.log.segments import list_files
from rt_appliance.replicate.sink import DAMAGED_DIR, ReplicaDir
from rt_appliance.replicate.source import DirectorySource
from rt_appliance.subscribe import Subscriber

pytestmark = pytest.mark.unit


def _publish(root: Path, count: int) -> Path:
    with Publisher(root, "t", "h1", fsync="never") as pub:
        for i in range(count):
            pub.publish(b"message %05d" % i, id=i + 1)
    return pub.directory


def _copy(source_dir: Path, replica: ReplicaDir) -> None:
    source = DirectorySource(source_dir, replica.end, 64 << 10)
    while (chunk := source.read()) is not None:
        replica.append(chunk.position, chunk.data)


@pytest.mark.parametrize("damage", ["zero", "flip"])
def test_a_damaged_copy_is_cut_kept_and_sent_again(tmp_path: Path, damage: str) -> None:
    original = _publish(tmp_path / "pub", 2000)
    copy_dir = tmp_path / "copy"
    shutil.copytree(original, copy_dir)
    last = list_files(copy_dir)[-1].path
    before = last.read_bytes()
    at = len(before) // 3
    damaged = bytearray(before)
    if damage == "zero":
        damaged[at : at + 4096] = bytes(4096)
    else:
        damaged[at] ^= 0x10
    last.write_bytes(bytes(damaged))

    replica = ReplicaDir(copy_dir)  # refused to open before the repair
    assert replica.repaired is not None
    assert replica.repaired.offset <= at
    assert replica.end.offset == replica.repaired.offset
    kept = list((copy_dir / DAMAGED_DIR).iterdir())
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(damaged)

    _copy(original, replica)
    replica.close()
    assert last.read_bytes() == before
    got = [m.payload for m in Subscriber(copy_dir).read()]
    assert got == [b"message %05d" % i for i in range(2000)]


def test_an_undamaged_copy_is_left_as_it_is(tmp_path: Path) -> None:
    original = _publish(tmp_path / "pub", 100)
    copy_dir = tmp_path / "copy"
    shutil.copytree(original, copy_dir)
    replica = ReplicaDir(copy_dir)
    assert replica.repaired is None and not (copy_dir / DAMAGED_DIR).exists()
    replica.close()


@pytest.mark.parametrize("cut", ["inside a record", "to the header"])
def test_a_copy_cut_under_it_refuses_the_next_chunk_and_resumes_where_it_now_ends(
    tmp_path: Path, cut: str
) -> None:
    """With O_APPEND, a chunk written after the file was cut would land at the cut, every
    later record at other offsets than the original's (found by ``rt chaos``: a merger
    found every later merge of that input wrong and fetched each from a peer)."""
    original = _publish(tmp_path / "pub", 2000)
    source_file = list_files(original)[-1].path
    whole = source_file.read_bytes()
    replica = ReplicaDir(tmp_path / "copy")
    source = DirectorySource(original, replica.end, 8 << 10)
    chunk = source.read()
    assert chunk is not None
    replica.append(chunk.position, chunk.data)
    copied = replica.end
    last = list_files(tmp_path / "copy")[-1].path
    at = copied.offset // 2 if cut == "inside a record" else 100
    os.truncate(last, at)

    nxt = source.read()
    assert nxt is not None and nxt.position == copied
    with pytest.raises(CorruptLogError, match="changed by something else"):
        replica.append(nxt.position, nxt.data)
    assert replica.end.offset <= at  # recovered: the torn record cut off
    assert last.stat().st_size == replica.end.offset

    _copy(original, replica)  # the sender resends from the copy's new end
    replica.close()
    assert last.read_bytes() == whole
    got = [m.payload for m in Subscriber(tmp_path / "copy").read()]
    assert got == [b"message %05d" % i for i in range(2000)]
