"""A subscriber's copy is synced after delivery; a sync that fails cuts the copy back to
its last good sync, and the pull goes on from there until the copy is whole again."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.config import load_config
from rt_appliance.replicate.pull_client import ClientMetrics, PullClient
from rt_appliance.replicate.pull_server import PullServer, ServerMetrics
from rt_appliance.replicate.topology import replica_dir
from rt_lab.testing.checkers import log_files, same_log_files
from rt_lab.testing.cluster import write_local_config
from tests.helpers import FailFirstThreadSync

pytestmark = pytest.mark.integration


def test_a_failed_sync_of_the_copy_is_cut_back_and_pulled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    served = tmp_path / "served"
    config = load_config(
        write_local_config(tmp_path, nodes=1, extra={"replication": {"pull_source": str(served)}})
    )
    with Publisher(served.parent, "served", "src", fsync="never") as pub:
        # small enough for one chunk written on the client's loop: the first sync in a
        # worker thread is then the copy's group sync
        pub.publish_batch([b"message %d" % i for i in range(500)])
    (served.parent / "served.src").rename(served)
    source = log_files(served)
    copy = replica_dir(config, config.subscriber("sub-1"))
    failing = FailFirstThreadSync()
    monkeypatch.setattr(os, "fdatasync", failing)

    async def pull() -> None:
        server = PullServer(config, "rt-1", ServerMetrics())
        await server.start()
        client = PullClient(config, "sub-1", ClientMetrics())
        task = asyncio.create_task(client.run())
        deadline = time.monotonic() + 30
        try:
            while not (
                same_log_files(source, copy) and client.replica.synced == client.replica.end
            ):
                assert time.monotonic() < deadline, "the copy never became whole and synced"
                assert not task.done(), task.exception()
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await server.stop()

    asyncio.run(pull())
    assert failing.failures == 1
    assert "syncing the copy failed" in caplog.text
