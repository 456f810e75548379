"""A push server whose sync fails acks nothing it may have lost, and the client resends it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.position import Position
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.push_server import PushServer
from rt_lab.testing.checkers import log_files, same_log_files
from tests.helpers import FailFirstThreadSync
from tests.replication.conftest import one_node

pytestmark = pytest.mark.integration


def test_a_failed_sync_is_cut_back_and_the_client_resends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = one_node(tmp_path)
    config, root, replica = stream.config, stream.root, stream.replica
    with Publisher(root, "trades", "pub-1", fsync="never") as pub:
        for b in range(20):
            pub.publish_batch([b"message %d" % (b * 1000 + i) for i in range(1000)])
    source = log_files(root / "trades.pub-1")
    failing = FailFirstThreadSync()
    monkeypatch.setattr(os, "fdatasync", failing)
    server, client = PushServer(config, "rt-1"), PushClient(config, "pub-1")
    newest = max(source, key=lambda name: tuple(int(x) for x in name.split(".")[1:]))
    session, roll = (int(x) for x in newest.split(".")[1:])
    source_end = Position.of(session, roll, len(source[newest]))

    def acked() -> Position | None:  # the client's last acknowledged position from rt-1
        return client.acked["rt-1"].get("trades.pub-1")

    async def replicate() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(server.run(stop)), asyncio.create_task(client.run(stop))]
        deadline = time.monotonic() + 30
        while not (same_log_files(source, replica) and acked() == source_end):
            assert time.monotonic() < deadline, "the replica never became whole"
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*tasks)

    asyncio.run(replicate())
    assert failing.failures == 1
    refused = server.metrics.registry.get_sample_value(
        "rt_push_server_refused_chunks_total", {"dir": "trades.pub-1", "reason": "sync_failed"}
    )
    assert refused == 1
