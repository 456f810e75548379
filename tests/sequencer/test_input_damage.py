"""A node's copy of an input damaged while it runs is mended, so its merges read local
bytes again instead of asking a peer for every one.

Found by ``rt chaos``: after a truncation of a node's newest input file, its push
server appended the resent bytes at the cut (the file is opened with O_APPEND), every
later record at other offsets than the publisher's; every later merge of that input
found the wrong bytes, asked the peers, and the node fell behind. A flipped bit or a
zeroed block in bytes not yet merged cost a peer round trip per merge too, and stayed
for the next time the node led.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import NodeStatus
from rt_appliance.subscribe import Subscriber
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def _raw(stream, node: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    answer = stream.node_status()[node]
    assert isinstance(answer, NodeStatus), answer
    return answer.raw


# inputs kept once merged, to compare every file of the copy with the publisher's
KEEP_INPUTS = {**SMALL, "archiver": {"prune_inputs": False}}


def test_an_input_copy_cut_while_it_is_written_is_resent_not_shifted(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra=KEEP_INPUTS).start()
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.payload_bytes = 200
    feed.start(2000)
    follower = next(n for n in stream.node_names if n != stream.wait_leader())
    copy = stream.data_dir(follower) / "in" / "trades.pub-1"
    wait_until(lambda: copy.is_dir() and list_files(copy), 30, "the follower's input copy")
    newest = list_files(copy)[-1].path
    wait_until(lambda: newest.stat().st_size > 64 << 10, 30, "64 KiB in the follower's copy")
    os.truncate(newest, newest.stat().st_size // 2 + 7)  # inside a record
    seq = int(_raw(stream, follower)["merged_seq"])  # type: ignore[call-overload]
    wait_until(
        lambda: int(_raw(stream, follower)["merged_seq"]) > seq + 400,  # type: ignore[call-overload]
        30,
        "the follower merging on",
    )
    feed.stop()
    check_stream(stream, [feed])
    other = next(n for n in stream.node_names if n != follower)  # the publisher prunes its own
    original = stream.data_dir(other) / "in" / "trades.pub-1"
    wait_until(lambda: _same_files(original, copy), 30, f"the follower's copy equal to {other}'s")
    assert _raw(stream, follower)["mismatches"] == 0  # no merge found wrong bytes in the copy


def _same_files(a: Path, b: Path) -> bool:
    names = [f.path.name for f in list_files(a)]
    return names == [f.path.name for f in list_files(b)] and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def test_a_flipped_bit_in_input_not_yet_merged_is_rewritten_from_a_peer(local_stream) -> None:  # type: ignore[no-untyped-def]
    """A node merging from its own copy finds the committed record cannot be built from
    it; it builds it from a peer's bytes and writes those over its own, once."""
    stream = local_stream(nodes=3, extra=KEEP_INPUTS).start()
    leader = stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.payload_bytes = 200
    feed.publish(1, 3000)  # several input files
    wait_until(lambda: _merged_everywhere(stream, 3000), 60, "3,000 messages merged everywhere")
    node = next(n for n in stream.node_names if n != leader)
    copies = [stream.data_dir(n) / "in" / "trades.pub-1" for n in stream.node_names]
    # merged everywhere is not pushed everywhere: a node may have merged from a peer's bytes
    # what its own push connection has not brought yet. Equal copies are whole copies.
    wait_until(
        lambda: (
            len(list_files(copies[0])) > 1 and all(_same_files(copies[0], c) for c in copies[1:])
        ),
        60,
        "every node's copy of trades.pub-1 whole",
    )
    stream.kill_node(node, signal.SIGTERM)
    # It merges every input again from its own copy: its merged log and raft state are gone
    # (a node restored from a backup of its inputs only).
    shutil.rmtree(stream.merged_dir(node))
    shutil.rmtree(stream.data_dir(node) / "raft")
    copy = stream.data_dir(node) / "in" / "trades.pub-1"
    closed = list_files(copy)[0].path  # not the newest: the push server does not reopen it
    with open(closed, "r+b") as f:
        f.seek(closed.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    stream.start_node(node)
    wait_until(lambda: _merged_everywhere(stream, 3000), 60, f"{node} to merge again")
    raw = _raw(stream, node)
    assert raw["mismatches"] == 1 and raw["repaired_inputs"] == 1, raw
    other = next(n for n in stream.node_names if n != node)
    assert _same_files(stream.data_dir(other) / "in" / "trades.pub-1", copy)
    check_stream(stream, [feed])


def _merged_everywhere(stream, count: int) -> bool:  # type: ignore[no-untyped-def]
    answers = stream.node_status()
    seqs = set()
    for answer in answers.values():
        if not isinstance(answer, NodeStatus):
            return False
        seqs.add((answer.merged_seq, answer.committed_seq))
    return len(seqs) == 1 and _messages(stream) >= count


def _messages(stream) -> int:  # type: ignore[no-untyped-def]
    return sum(len(b) for b in Subscriber(stream.merged_dir(stream.node_names[0])).read_batches())
