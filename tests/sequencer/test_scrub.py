"""A follower's merged log damaged while it runs (a zeroed block in a closed file, a flipped
bit and a cut in the newest one) is found by the scrubber and rewritten from a peer's
bytes, so every merged log ends byte-identical. Found by ``rt chaos`` (seed 11: a zeroed
block in rt-2's merged log stayed there; the node diverged for good)."""

from __future__ import annotations

import os

import pytest

from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import NodeStatus
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import Feed, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.fault]

EXTRA = {
    "sequencer": {
        "merged_roll_bytes": "1MiB",
        "max_range_bytes": "64KiB",
        "scrub_interval_ms": 100,
    }
}


def _scrub(stream, node: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    answer = stream.node_status()[node]
    assert isinstance(answer, NodeStatus), answer
    return dict(answer.raw.get("scrub") or {})


def test_damage_in_a_running_merged_log_is_repaired_from_a_peer(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra=EXTRA).start()
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.payload_bytes = 200
    feed.start(2000)
    merged = stream.merged_dir("rt-2")
    wait_until(lambda: len(list_files(merged)) >= 3, 60, "three merged files on rt-2")
    files = list_files(merged)
    closed, newest = files[0].path, files[-1].path
    with open(closed, "r+b") as f:  # a zeroed block in a file no one writes any more
        f.seek(closed.stat().st_size // 2)
        f.write(bytes(4096))
    with open(newest, "r+b") as f:  # a flipped bit in the file being written
        f.seek(newest.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x04]))
    wait_until(lambda: _scrub(stream, "rt-2").get("repaired", 0) >= 2, 60, "two repairs on rt-2")
    feed.stop()
    check_stream(stream, [feed])
    scrub = _scrub(stream, "rt-2")
    assert scrub["damaged"] >= 2 and scrub["repaired"] >= 2
    assert "scrub: repaired" in stream.daemons["sequencer-rt-2"].log()
