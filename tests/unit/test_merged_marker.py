"""A restart scans the newest merged file only past its synced marker, and never trusts a
marker that does not match the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rt_appliance.position import Position
from rt_appliance.sequencer.merged import MARKER, MergedLog
from rt_appliance.sequencer.state import merged_header
from tests.helpers import merged_records

pytestmark = pytest.mark.unit

STREAM = "teststream"


def _log_with(directory: Path, sizes: list[int]) -> tuple[MergedLog, bytes, bytes]:
    """A merged log written through MergedLog.append and synced (the marker written)."""
    header = merged_header(STREAM, 0, 1)
    body = merged_records(sizes)
    log = MergedLog(directory)
    at, offset = 0, len(header)
    for size in sizes:  # one record at a time, as the merger appends them
        one = merged_records([size], first_seq=1 + sizes.index(size))
        record = body[at : at + len(one)]
        log.append(int(Position.of(1, 0, offset)), record, header)
        at, offset = at + len(record), offset + len(record)
    log.sync()
    return log, header, body


def test_a_restart_scans_only_what_follows_the_marker(tmp_path: Path) -> None:
    directory = tmp_path / "merged"
    log, header, body = _log_with(directory, [100, 200, 300, 400])
    mark = log.read_mark()
    assert mark is not None and (mark.roll, mark.end, mark.seq) == (0, log.size, 4)
    log.close()
    again = MergedLog(directory)
    try:
        assert again.scanned_bytes == 0  # everything was vouched for
        assert (again.seq, again.size) == (4, len(header) + len(body))
    finally:
        again.close()


def test_a_torn_tail_after_the_marker_is_cut(tmp_path: Path) -> None:
    directory = tmp_path / "merged"
    log, header, body = _log_with(directory, [100, 200, 300])
    log.close()
    more = merged_records([100, 200, 300, 500], first_seq=1)[len(body) :]  # record 4 ...
    with open(directory / "log.1.0", "ab") as f:
        f.write(more[: len(more) // 2])  # ... half written before a crash
    again = MergedLog(directory)
    try:
        assert 0 < again.scanned_bytes < len(more)
        assert (again.seq, again.size) == (3, len(header) + len(body))
        assert (directory / "log.1.0").stat().st_size == len(header) + len(body)
    finally:
        again.close()


@pytest.mark.parametrize(
    "lie",
    [
        {"seq": 9},  # not the seq of the record there
        {"record": 70},  # not where a record starts
        {"end": 10_000_000},  # past the end of the file
        {"roll": 5},  # another file
        "not json",
    ],
)
def test_a_marker_that_does_not_match_is_ignored(tmp_path: Path, lie: object) -> None:
    directory = tmp_path / "merged"
    log, header, body = _log_with(directory, [100, 200, 300])
    log.close()
    marker = directory / MARKER
    if isinstance(lie, dict):
        marker.write_text(json.dumps({**json.loads(marker.read_text()), **lie}))
    else:
        marker.write_text(str(lie))
    (directory / "log.1.0").write_bytes(header + body + b"\x07" * 50)  # and a torn tail
    again = MergedLog(directory)
    try:
        assert again.scanned_bytes == len(body) + 50  # the whole file, after its header
        assert (again.seq, again.size) == (3, len(header) + len(body))
    finally:
        again.close()


def test_a_marker_that_cannot_be_written_costs_only_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk (found by `rt chaos`): the marker fails, the log's sync does not."""
    import errno
    import os

    import rt_appliance.sequencer.merged as merged_module

    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(MARKER + ".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(merged_module.os, "fsync", fsync)
    directory = tmp_path / "merged"
    log, header, body = _log_with(directory, [100, 200])  # syncs, and tries the marker
    assert log.read_mark() is None and not (directory / (MARKER + ".tmp")).exists()
    log.close()
    monkeypatch.undo()
    again = MergedLog(directory)
    try:
        assert again.scanned_bytes == len(body)  # no marker: the whole file
        assert (again.seq, again.size) == (2, len(header) + len(body))
    finally:
        again.close()
