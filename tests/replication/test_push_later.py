"""A node whose copy no merge waits for (a follower while the leader carries the input)
says so in its acknowledgements (``"later": true``), and the publisher's sender then
sends it a new write a little later, with what follows: fewer frames, after raft's
round for the same bytes. A node that does not say so gets each write at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.limits import PUSH_LATER_S
from rt_appliance.replicate import push_client
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.replicate.push_server import PushServer
from rt_lab.testing.checkers import log_files, same_log_files
from tests.replication.conftest import one_node

pytestmark = pytest.mark.integration

WRITES = 40
HOLD_S = 0.3  # PUSH_LATER_S for these tests: longer than all the writes take


def _frames_for(tmp_path: Path, later: bool) -> tuple[int, bool]:
    """Frames the client sent for WRITES writes 2 ms apart, once the node has
    acknowledged a first one; and whether the client took the node's ``later``."""
    stream = one_node(tmp_path)
    config, root, replica = stream.config, stream.root, stream.replica
    server = PushServer(config, "rt-1", later=lambda: later)
    client = PushClient(config, "pub-1")

    def frames() -> int:
        value = client.metrics.registry.get_sample_value(
            "rt_push_client_chunks_total", {"node": "rt-1", "dir": "trades.pub-1"}
        )
        return int(value or 0)

    async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 20
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.005)

    async def replicate(pub: Publisher) -> tuple[int, bool]:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(server.run(stop)), asyncio.create_task(client.run(stop))]
        pub.publish(b"first")
        pub.flush()
        await until(lambda: client.acked["rt-1"].get("trades.pub-1") == pub.position, "an ack")
        told = client._later.get("rt-1", False)
        before = frames()
        for i in range(WRITES):  # each a write of its own, 2 ms apart
            pub.publish(b"message %d" % i)
            pub.flush()
            await asyncio.sleep(0.002)
        source = log_files(root / "trades.pub-1")
        await until(lambda: same_log_files(source, replica), "the replica to be whole")
        sent = frames() - before
        stop.set()
        await asyncio.gather(*tasks)
        return sent, told

    with Publisher(root, "trades", "pub-1", fsync="never") as pub:
        return asyncio.run(replicate(pub))


def test_a_node_that_says_later_gets_writes_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert 0 < PUSH_LATER_S < 0.05  # the default: well inside a message's round
    monkeypatch.setattr(push_client, "PUSH_LATER_S", HOLD_S)
    sent, told = _frames_for(tmp_path, later=True)
    assert told
    # the first write after the acknowledged one is held HOLD_S, and the others, made
    # meanwhile, go with it
    assert sent <= 2, sent


def test_a_node_that_does_not_gets_each_write_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push_client, "PUSH_LATER_S", HOLD_S)
    sent, told = _frames_for(tmp_path, later=False)
    assert not told
    assert sent >= 4, sent  # about one per write; fewer only while the window is full
