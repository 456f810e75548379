"""Every payload size the Publisher accepts travels the whole path: push, merge, pull, Subscriber.

The stream uses the smallest limits the configuration allows (64 KiB frames, 4 KiB
merge ranges, 1 MiB merged files), so that every edge case around them is cheap,
and then sends the largest payload there is, ``MAX_PAYLOAD_BYTES``, through it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.limits import FRAME_MARGIN_BYTES, MAX_PAYLOAD_BYTES
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.subscribe import Subscriber
from rt_lab.testing.checkers import assert_clean, check_merged
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream

FRAME = 64 << 10
CHUNK = FRAME - FRAME_MARGIN_BYTES  # the most file bytes one DATA frame carries
RANGE = 4 << 10
ROLL = 1 << 20
LIMITS = {
    "replication": {"max_frame_bytes": "64KiB"},
    "sequencer": {"merged_roll_bytes": "1MiB", "max_range_bytes": "4KiB"},
}
HEAD = RECORD_HEADER.size
SIZES = [
    0,
    1,
    FRAME - 1,
    FRAME,
    FRAME + 1,
    CHUNK - HEAD - 1,  # the record one byte short of a chunk
    CHUNK - HEAD,  # exactly a chunk
    CHUNK - HEAD + 1,  # one byte over: two pieces
    RANGE + 1,
    ROLL + 1,
    3 * ROLL + 7,
    MAX_PAYLOAD_BYTES,
]


def payload(i: int, size: int) -> bytes:
    """Distinct, incompressible-looking bytes (cheap to make at 64 MiB: a repeated block)."""
    block = random.Random(i).randbytes(min(size, 1 << 16))
    return (block * (size // max(len(block), 1) + 1))[:size] if size else b""


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[LocalStream]:
    with LocalStream(tmp_path / "s", nodes=3, extra=LIMITS) as s:
        s.start()
        s.wait_leader()
        yield s


class Sent:
    """What one test published: ids 1.. in order, with each payload's digest."""

    def __init__(self, stream: LocalStream) -> None:
        self.stream = stream
        self.digests: list[str] = []

    def publish(self, sizes: list[int]) -> None:
        with Publisher(self.stream.publisher_root("pub-1"), "trades", "pub-1") as pub:
            for size in sizes:
                for body in (b"small-before", payload(len(self.digests), size), b"small-after"):
                    pub.publish(body, id=len(self.digests) + 1)
                    self.digests.append(hashlib.sha256(body).hexdigest())

    def check(self, timeout_s: float = 120) -> None:
        """Every node's merged log and the subscriber copy identical, each id once in order,
        and every payload delivered to a Subscriber as it was published."""
        copy = self.stream.subscriber_dir("sub-1")
        expected = {("trades", "pub-1"): list(range(1, len(self.digests) + 1))}
        report = check_merged(
            self.stream, expected, timeout_s=timeout_s, copies={"sub-1": copy}, key="id"
        )
        assert_clean(report, self.stream.logs())
        got = [hashlib.sha256(m.payload).hexdigest() for m in Subscriber(copy).read()]
        assert got == self.digests


def test_every_size_travels_end_to_end(stream: LocalStream) -> None:
    sent = Sent(stream)
    sent.publish(SIZES)
    sent.check()
    # rt subscribe prints them too, each payload whole
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rt_appliance.cli",
            "subscribe",
            "--payload",
            "base64",
            "--dir",
            str(stream.subscriber_dir("sub-1")),
        ],
        capture_output=True,
        check=True,
        timeout=300,
    ).stdout.splitlines()
    digests = [
        hashlib.sha256(base64.b64decode(json.loads(line)["payload_base64"])).hexdigest()
        for line in out
    ]
    assert digests == sent.digests
    # the largest record went out in pieces, never in one frame
    assert "frame of" not in stream.logs(tail_chars=200_000)


def _input_size(stream: LocalStream, node: str) -> int:
    directory = stream.input_dir(node, "pub-1", "trades")
    return sum(p.stat().st_size for p in directory.glob("log.*")) if directory.is_dir() else 0


def test_push_client_killed_mid_record_resends_it_whole(stream: LocalStream) -> None:
    sent = Sent(stream)
    sent.publish([10])
    sent.check()
    before = {n: _input_size(stream, n) for n in stream.node_names}
    client = stream.publisher_daemon("pub-1")
    sent.publish([MAX_PAYLOAD_BYTES])
    # in flight: some node holds part of the record, none holds all of it
    wait_until(
        lambda: any(
            0 < _input_size(stream, n) - before[n] < MAX_PAYLOAD_BYTES for n in stream.node_names
        ),
        60,
        "the large record to be in flight",
    )
    client.kill()
    client.start()
    sent.publish([5, MAX_PAYLOAD_BYTES // 3])
    sent.check()


def test_leader_killed_mid_record_loses_nothing(stream: LocalStream) -> None:
    sent = Sent(stream)
    sent.publish([10])
    sent.check()
    leader = stream.wait_leader()
    before = _input_size(stream, leader)
    sent.publish([MAX_PAYLOAD_BYTES, 7])
    wait_until(lambda: _input_size(stream, leader) > before, 60, "the large record on its way")
    stream.kill_node(leader)
    stream.wait_leader(not_in=[leader])
    sent.publish([3])
    stream.start_node(leader)
    sent.check(timeout_s=180)
