"""Many small writes in quick succession travel in few chunks (``send_interval_ms``)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.config import load_config
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.push_server import PushServer
from rt_appliance.testing.checkers import log_files, same_log_files
from rt_appliance.testing.cluster import write_local_config

pytestmark = pytest.mark.integration

MESSAGES = 60


def test_small_writes_are_sent_together(tmp_path: Path) -> None:
    extra = {"replication": {"delete_acked": False, "send_interval_ms": 250}}
    config = load_config(write_local_config(tmp_path, nodes=1, extra=extra))
    root = config.data_dir_of(config.publisher("pub-1")) / "pub"
    replica = config.data_dir_of(config.node("rt-1")) / "in" / "trades.pub-1"
    server, client = PushServer(config, "rt-1"), PushClient(config, "pub-1")
    published = threading.Event()

    def publish() -> None:  # one write every 5 ms: 60 writes over about 0.3 s
        with Publisher(root, "trades", "pub-1", fsync="never") as pub:
            for i in range(MESSAGES):
                pub.publish(b"message %d" % i)
                time.sleep(0.005)
        published.set()

    def sample(metric: str, registry_of: PushClient | PushServer) -> float:
        labels = {"node": "rt-1", "dir": "trades.pub-1"}
        return registry_of.metrics.registry.get_sample_value(metric, labels) or 0.0

    async def replicate() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(server.run(stop)), asyncio.create_task(client.run(stop))]
        writer = threading.Thread(target=publish)
        writer.start()
        deadline = time.monotonic() + 30
        while not (
            published.is_set()
            and sample("rt_push_client_records_total", client) == MESSAGES
            and same_log_files(log_files(root / "trades.pub-1"), replica)
        ):
            assert time.monotonic() < deadline, "the replica never became whole"
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*tasks)
        writer.join()

    asyncio.run(replicate())
    sent = sample("rt_push_client_chunks_total", client)
    received = sample("rt_push_server_chunks_total", server)
    assert sent == received
    # 60 writes over ~0.3 s at most every 250 ms: a handful of chunks, not one per write
    assert 1 <= sent <= 8, f"{sent} chunks for {MESSAGES} writes"
