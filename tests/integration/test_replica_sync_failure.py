"""A replica whose sync fails keeps nothing the disk may have lost: the sender resends it."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.errors import LogError
from rt_appliance.log.format import FILE_KIND_PUBLISHER, encode_batch, encode_file_header
from rt_appliance.position import Position
from rt_appliance.replicate.sink import ReplicaDir

pytestmark = pytest.mark.integration

HEADER = encode_file_header(FILE_KIND_PUBLISHER, 1, 0, 123, "trades", "pub-1")
FIRST = encode_batch([b"first %d" % i for i in range(100)], 1, None)[0]
SECOND = encode_batch([b"second %d" % i for i in range(100)], 2, None)[0]


class _FailOnce:
    """``os.fdatasync`` that fails the first time (a write-back error), then works."""

    def __init__(self) -> None:
        self.real, self.failed = os.fdatasync, False

    def __call__(self, fd: int) -> None:
        if not self.failed:
            self.failed = True
            raise OSError(errno.EIO, "Input/output error")
        self.real(fd)


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[ReplicaDir]:
    opened = ReplicaDir(tmp_path / "trades.pub-1")
    try:
        yield opened
    finally:
        opened.close()


def test_a_failed_grouped_sync_cuts_back_to_the_last_good_one(replica: ReplicaDir) -> None:
    path = replica.directory / "log.1.0"
    first_end = replica.append(Position.of(1, 0, 0), HEADER + FIRST, sync=False)
    replica.mark_synced(first_end)  # as the push server does after its sync
    second_end = replica.append(first_end, SECOND, sync=False)
    assert path.stat().st_size == second_end.offset
    with pytest.raises(LogError, match=r"sync failed .*cut back to"):
        replica.cut_unsynced(OSError(errno.EIO, "Input/output error"))
    assert replica.end == first_end
    assert path.read_bytes() == HEADER + FIRST
    # The sender resends from the replica's end; the copy is whole again.
    replica.append(replica.end, SECOND, sync=False)
    assert path.read_bytes() == HEADER + FIRST + SECOND


def test_a_failed_sync_in_append_keeps_only_what_was_synced(
    replica: ReplicaDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = replica.directory / "log.1.0"
    first_end = replica.append(Position.of(1, 0, 0), HEADER + FIRST)  # synced
    assert replica.synced == first_end
    with monkeypatch.context() as m:
        m.setattr(os, "fdatasync", _FailOnce())
        with pytest.raises(LogError, match=r"sync failed .*cut back to"):
            replica.append(first_end, SECOND)
    assert replica.end == first_end
    assert path.read_bytes() == HEADER + FIRST
    replica.close()
    reopened = ReplicaDir(replica.directory)  # and a restart sees the same
    try:
        assert reopened.end == first_end
    finally:
        reopened.close()
