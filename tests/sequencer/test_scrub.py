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


def _feeding(local_stream, extra: dict[str, object]):  # type: ignore[no-untyped-def]
    """A 3-node stream with a publisher at 2,000 msg/s of 200-byte payloads; returns the
    stream, the feed and rt-2's merged directory."""
    stream = local_stream(nodes=3, extra=extra).start()
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.payload_bytes = 200
    feed.start(2000)
    return stream, feed, stream.merged_dir("rt-2")


def test_damage_in_a_running_merged_log_is_repaired_from_a_peer(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream, feed, merged = _feeding(local_stream, EXTRA)
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


def test_a_cut_in_the_file_being_written_is_repaired_before_the_next_append(local_stream) -> None:  # type: ignore[no-untyped-def]
    """The merged file being written is cut while the node runs. Its merger appends, so
    a record written after the cut would land where the cut left the end, not at its
    committed position, and a subscriber reading on would be sent records out of place.
    The merger finds the file changed before its next append and repairs it from a peer
    first; the periodic scrubber is off here, so nothing else would."""
    extra = {"sequencer": {**EXTRA["sequencer"], "scrub_interval_ms": 0}}
    stream, feed, merged = _feeding(local_stream, extra)

    def newest_half_full() -> bool:
        files = list_files(merged)
        return len(files) >= 2 and files[-1].path.stat().st_size > 512 << 10

    wait_until(newest_half_full, 60, "a half-full newest merged file on rt-2")
    newest = list_files(merged)[-1]
    os.truncate(newest.path, newest.path.stat().st_size // 2)
    rolls = newest.roll + 2
    wait_until(lambda: list_files(merged)[-1].roll >= rolls, 60, "two more merged files")
    feed.stop()
    check_stream(stream, [feed])
    log_text = stream.daemons["sequencer-rt-2"].log()
    assert "changed under the merger" in log_text
    assert "scrub: repaired" in log_text
