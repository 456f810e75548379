"""A cached directory listing never misses an entry, and lists only when it must."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rt_appliance.log.segments import ListingCache, StreamFile, list_files

pytestmark = pytest.mark.integration


class _Counting:
    def __init__(self) -> None:
        self.reads = 0

    def __call__(self, directory: Path) -> list[StreamFile]:
        self.reads += 1
        return list_files(directory)


def _names(files: list[StreamFile]) -> list[str]:
    return [f.path.name for f in files]


def test_a_settled_listing_is_reused_and_any_change_is_seen(tmp_path: Path) -> None:
    d = tmp_path / "trades.pub-1"
    d.mkdir()
    (d / "log.1.0").write_bytes(b"")
    past = time.time() - 10
    os.utime(d, (past, past))  # the listing's mtime is long settled
    read = _Counting()
    cache = ListingCache(d, read)
    assert _names(cache.get()) == ["log.1.0"]
    assert _names(cache.get()) == ["log.1.0"]
    assert read.reads == 1  # the second call only looked at the directory's mtime
    (d / "log.1.1").write_bytes(b"")  # a new entry moves the mtime
    assert _names(cache.get()) == ["log.1.0", "log.1.1"]
    # Created within the same clock tick as that listing: the mtime may not move, so a
    # listing taken this close to its mtime is not trusted and the next call lists again.
    (d / "log.1.2").write_bytes(b"")
    assert _names(cache.get()) == ["log.1.0", "log.1.1", "log.1.2"]
    (d / "log.1.0").unlink()
    assert _names(cache.get()) == ["log.1.1", "log.1.2"]
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    assert cache.get() == []
    d.mkdir()  # a new directory under the same name: another inode
    (d / "log.2.0").write_bytes(b"")
    os.utime(d, (past, past))
    assert _names(cache.get()) == ["log.2.0"]
