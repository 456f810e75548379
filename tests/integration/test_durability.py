"""When the publisher syncs: each durability mode, observed by recording every fdatasync."""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.log.segments import list_files
from tests.helpers import check_whole_log, wait_until

pytestmark = pytest.mark.integration


class Syncs:
    """Every ``fdatasync`` of a stream file: (inode, size at the time)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail_next = 0  # make this many calls fail with EIO
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()

    def durable_size(self, path: Path) -> int:
        """The largest size of ``path`` a sync has covered so far (0: never synced)."""
        ino = path.stat().st_ino
        with self._lock:
            return max((size for i, size in self.calls if i == ino), default=0)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Syncs]:
    record = Syncs()
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        st = os.fstat(fd)
        with record._lock:
            if record.fail_next:
                record.fail_next -= 1
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)
        with record._lock:
            record.calls.append((st.st_ino, st.st_size))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield record


def all_durable(pub: Publisher, syncs: Syncs) -> bool:
    files = [f.path for f in list_files(pub.directory)]
    return all(syncs.durable_size(p) == p.stat().st_size for p in files)


def test_always_syncs_every_call(tmp_path: Path, syncs: Syncs) -> None:
    with Publisher(tmp_path, "t", "h", fsync="always", roll_bytes=1024) as pub:
        for i in range(30):
            pub.publish(b"%d" % i * 30)
            assert all_durable(pub, syncs)
        pub.publish_batch([b"b" * 100] * 12)  # rolls inside the call
        assert all_durable(pub, syncs)


def test_batch_syncs_batches_and_every_n_singles(tmp_path: Path, syncs: Syncs) -> None:
    with Publisher(
        tmp_path, "t", "h", fsync="batch", fsync_batch_messages=5, roll_bytes=1 << 20
    ) as pub:
        current = pub._writer.current.path
        for i in range(1, 13):
            pub.publish(b"m")
            assert (syncs.durable_size(current) == current.stat().st_size) == (i % 5 == 0)
        pub.publish_batch([b"a", b"b"])
        assert all_durable(pub, syncs)


def test_interval_syncs_in_the_background(tmp_path: Path, syncs: Syncs) -> None:
    with Publisher(tmp_path, "t", "h", fsync="interval", fsync_interval_ms=20) as pub:
        pub.publish(b"x" * 100)
        wait_until(lambda: all_durable(pub, syncs), timeout=10, what="a background sync")
        pub.publish(b"y" * 100)
        wait_until(lambda: all_durable(pub, syncs), timeout=10, what="a second background sync")


def test_interval_retries_a_failed_background_sync(
    tmp_path: Path, syncs: Syncs, caplog: pytest.LogCaptureFixture
) -> None:
    with Publisher(tmp_path, "t", "h", fsync="interval", fsync_interval_ms=10) as pub:
        syncs.fail_next = 1
        with caplog.at_level(logging.ERROR):
            pub.publish(b"x" * 100)
            wait_until(lambda: all_durable(pub, syncs), timeout=10, what="a retried sync")
        assert syncs.fail_next == 0
        assert "background sync failed" in caplog.text


def test_never_syncs_only_on_flush_and_flush_covers_rolled_files(
    tmp_path: Path, syncs: Syncs
) -> None:
    with Publisher(tmp_path, "t", "h", fsync="never", roll_bytes=1024) as pub:
        sent = [b"%03d" % i * 20 for i in range(60)]
        for body in sent:
            pub.publish(body)
        files = list_files(pub.directory)
        assert len(files) > 3
        assert all(syncs.durable_size(f.path) < f.path.stat().st_size for f in files)
        pub.flush()
        assert all_durable(pub, syncs)  # the rolled files too, not only the current one
        syncs.clear()
        pub.publish(b"after flush")
        assert syncs.calls == []
    check_whole_log(pub.directory, [*sent, b"after flush"])
