"""A copy keeps where each file ended when its sender moved on to the next one.

The sender reads its files in order and starts the next one only once every whole record
of the last was sent from where the copy ends, so the copy saw that file end: its end and
where the next file's records begin. A leader moves its plan on to an input's next file
on that (sequencer/planner.py). Real files, copied through the sender's own reader.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.limits import FILE_ENDS_KEPT
from rt_appliance.log.format import decode_file_header
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.replicate.sink import FileEnd, ReplicaDir
from rt_appliance.replicate.source import DirectorySource

pytestmark = pytest.mark.unit


def _publish(root: Path, count: int, sessions: int = 1) -> Path:
    """``count`` messages per session, in files of 2 KiB."""
    for s in range(sessions):
        with Publisher(root, "t", "h1", fsync="never", roll_bytes=2048) as pub:
            for i in range(count):
                pub.publish(b"session %d message %05d" % (s, i))
    return pub.directory


def _copy(source_dir: Path, replica: ReplicaDir) -> None:
    source = DirectorySource(source_dir, replica.end, 64 << 10)
    while (chunk := source.read()) is not None:
        replica.append(chunk.position, chunk.data)


def _expected(directory: Path) -> dict[tuple[int, int], FileEnd]:
    """Every file but the newest: its size, and where the next file's records begin."""
    files = list_files(directory)
    ends = {}
    for f, nxt in itertools.pairwise(files):
        header = decode_file_header(nxt.path.read_bytes())
        assert not isinstance(header, str)
        start = Position.of(nxt.session, nxt.roll, header.header_bytes)
        ends[f.key] = FileEnd(f.path.stat().st_size, start)
    return ends


def test_each_file_the_sender_moved_on_from_is_known_with_where_the_next_begins(
    tmp_path: Path,
) -> None:
    original = _publish(tmp_path / "pub", 100, sessions=2)
    expected = _expected(original)
    assert len(expected) >= 4, "the test needs several rolls and a new session"
    sessions = {key[0] for key in expected}
    assert len(sessions) == 2
    replica = ReplicaDir(tmp_path / "copy", fsync=False)
    _copy(original, replica)
    newest = list_files(original)[-1].key
    assert replica.file_end(newest) is None, "the file being written has not ended"
    for key, end in expected.items():
        assert replica.file_end(key) == end, key


def test_a_copy_opened_again_knows_only_the_ends_it_saw(tmp_path: Path) -> None:
    """After a restart nothing is known of files that ended before it: a leader then
    waits for the majority's reported ends. A file it was writing when it opened and
    that the sender moved on from since is known again."""
    original = _publish(tmp_path / "pub", 40)
    first = list_files(original)
    copy_dir = tmp_path / "copy"
    replica = ReplicaDir(copy_dir, fsync=False)
    _copy(original, replica)
    replica.close()

    _publish(tmp_path / "pub", 40)  # a new session: the sender moves on from the last file
    replica = ReplicaDir(copy_dir, fsync=False)
    _copy(original, replica)
    expected = _expected(original)
    for f in first[:-1]:
        assert replica.file_end(f.key) is None, f"{f.key} ended before this copy opened"
    assert replica.file_end(first[-1].key) == expected[first[-1].key]


def test_only_the_newest_ends_are_kept(tmp_path: Path) -> None:
    original = _publish(tmp_path / "pub", 60 * FILE_ENDS_KEPT)
    expected = _expected(original)
    assert len(expected) > FILE_ENDS_KEPT
    replica = ReplicaDir(tmp_path / "copy", fsync=False)
    _copy(original, replica)
    keys = sorted(expected)
    for key in keys[:-FILE_ENDS_KEPT]:
        assert replica.file_end(key) is None
    for key in keys[-FILE_ENDS_KEPT:]:
        assert replica.file_end(key) == expected[key]


def test_an_unchanged_copy_of_a_finished_directory_has_no_news(tmp_path: Path) -> None:
    """A copy made whole by another means (copied, not sent) saw no sender move on."""
    original = _publish(tmp_path / "pub", 60)
    shutil.copytree(original, tmp_path / "copy")
    replica = ReplicaDir(tmp_path / "copy", fsync=False)
    _copy(original, replica)
    assert all(replica.file_end(f.key) is None for f in list_files(original))
