"""A push connection keeps at most PUSH_WINDOW_FRAMES frames unacknowledged: while the
node's sync is slow, what the publisher writes piles up and leaves in one frame."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.limits import PUSH_WINDOW_FRAMES
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.push_server import PushServer
from rt_lab.testing.checkers import log_files, same_log_files
from tests.replication.conftest import one_node

pytestmark = pytest.mark.integration

WRITES = 50  # separate publisher writes while the node's sync is held


class _HeldSync:
    """``os.fdatasync`` that, in a worker thread (the push server's grouped sync), waits
    until released; other syncs go straight through."""

    def __init__(self) -> None:
        self.real = os.fdatasync
        self.release = threading.Event()
        self.waiting = threading.Event()

    def __call__(self, fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.waiting.set()
            self.release.wait(30)
        self.real(fd)


def test_a_full_window_holds_writes_back_and_sends_them_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = one_node(tmp_path)
    config, root, replica = stream.config, stream.root, stream.replica
    held = _HeldSync()
    monkeypatch.setattr(os, "fdatasync", held)
    server, client = PushServer(config, "rt-1"), PushClient(config, "pub-1")

    def frames() -> int:
        value = client.metrics.registry.get_sample_value(
            "rt_push_client_chunks_total", {"node": "rt-1", "dir": "trades.pub-1"}
        )
        return int(value or 0)

    async def wait(condition, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 20
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def replicate(pub: Publisher) -> tuple[int, int]:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(server.run(stop)), asyncio.create_task(client.run(stop))]
        pub.publish(b"first")
        pub.flush()
        await wait(held.waiting.is_set, "the node's first sync")
        for i in range(WRITES):  # each one a write of its own, each one waking the client
            pub.publish(b"message %d" % i)
            pub.flush()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # what a client without a window would send meanwhile
        while_held = frames()
        held.release.set()
        source = log_files(root / "trades.pub-1")
        await wait(lambda: same_log_files(source, replica), "the replica to be whole")
        after = frames()
        stop.set()
        await asyncio.gather(*tasks)
        return while_held, after

    with Publisher(root, "trades", "pub-1", fsync="never") as pub:
        while_held, after = asyncio.run(replicate(pub))
    # the window filled (the first write, then one more frame) and nothing else left
    assert while_held == PUSH_WINDOW_FRAMES
    # the 50 writes made while it was full went out together once it opened
    assert after <= PUSH_WINDOW_FRAMES + 2, after
