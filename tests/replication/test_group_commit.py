"""Group commit on a push server: a sync covers exactly what was written before it began,
and everything written while it ran is covered by the one next sync."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from rt_appliance.config import load_config
from rt_appliance.position import Position
from rt_appliance.replicate import push_server
from rt_appliance.replicate.push_server import PushServer
from rt_lab.testing.cluster import write_local_config

DIR = "trades.pub-1"


class _Replica:
    """What the acker needs of a replica: where its written bytes end, and a handle to sync."""

    def __init__(self, path: Path) -> None:
        self.path, self.end, self.synced = path, Position(0), Position(0)

    def write(self, nbytes: int) -> None:
        self.end = Position(int(self.end) + nbytes)

    def sync_handle(self) -> tuple[int, Position]:
        return os.open(self.path, os.O_RDONLY), self.end

    def mark_synced(self, end: Position) -> None:
        self.synced = end


class _Conn:
    def __init__(self) -> None:
        self.acks: list[int] = []

    async def send(self, frame_type: int, fields: dict[str, Any]) -> None:
        self.acks.append(int(fields["position"]))


def test_one_sync_covers_what_came_before_it_and_the_next_everything_during_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(write_local_config(tmp_path, nodes=1))
    server = PushServer(config, "rt-1")
    (tmp_path / "replica").write_bytes(b"")
    replica, conn = _Replica(tmp_path / "replica"), _Conn()
    syncing, release = threading.Event(), threading.Event()
    syncs: list[int] = []

    def slow_sync(fd: int) -> None:  # the first sync takes until the test lets it go
        syncs.append(fd)
        syncing.set()
        if len(syncs) == 1:
            assert release.wait(10)

    monkeypatch.setattr(push_server.os, "fdatasync", slow_sync)

    async def run() -> None:
        pending: dict[str, Any] = {}
        wake = asyncio.Event()
        acker = asyncio.create_task(server._ack_loop(conn, pending, wake))  # type: ignore[arg-type]

        def frame(nbytes: int) -> None:  # what a DATA frame does: write, then wake the acker
            replica.write(nbytes)
            pending[DIR] = replica
            wake.set()

        frame(100)
        await asyncio.to_thread(syncing.wait, 10)  # the first sync is under way
        for _ in range(50):  # frames arriving while it runs
            frame(10)
            await asyncio.sleep(0)
        release.set()
        while conn.acks[-1:] != [600]:
            await asyncio.sleep(0.001)
        acker.cancel()

    asyncio.run(asyncio.wait_for(run(), 20))
    assert conn.acks == [100, 600]  # the first sync acks only what came before it
    assert len(syncs) == 2  # the fifty frames during it: one more sync, not fifty
    assert replica.synced == 600
