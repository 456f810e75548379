"""A carried merge applied while the merger is idle is written by the thread that
applied it (the event loop, in a node), with no hand-off to the merger's thread; any
other instruction, a backlog, or a merge while the merger is busy stays the thread's,
and the merged log is the same whoever writes it."""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rt_appliance.config import StreamConfig, load_config
from rt_appliance.limits import INLINE_MERGES_MAX
from rt_appliance.log.format import encode_batch
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import PeerFetcher
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merged import MergedLog
from rt_appliance.sequencer.merger import Merger, build_record
from rt_appliance.sequencer.state import Merge
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.integration

DIR = "trades.pub-1"


@dataclass
class Node:
    machine: SequencerMachine
    merged: MergedLog
    merger: Merger
    next_start: int = int(Position.of(1, 0, 64))
    next_id: int = 1


@pytest.fixture
def config(tmp_path: Path) -> StreamConfig:
    return load_config(write_local_config(tmp_path))


@contextlib.contextmanager
def _node(config: StreamConfig, where: Path) -> Iterator[Node]:
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    merged = MergedLog(where / "merged")
    fetcher = PeerFetcher(config, "rt-1")
    merger = Merger(
        config,
        "rt-1",
        machine,
        merged,
        Inputs(where / "in", sync=False),
        fetcher,
        where / "log-history.jsonl",
    )
    try:
        yield Node(machine, merged, merger)
    finally:
        merger._stop.set()
        fetcher.close()
        merged.close()


@pytest.fixture
def nodes(config: StreamConfig, tmp_path: Path) -> Iterator[Callable[[str], Node]]:
    """Nodes made on demand (each in its own directory), all closed at the end."""
    with contextlib.ExitStack() as stack:
        yield lambda name: stack.enter_context(_node(config, tmp_path / name))


@pytest.fixture
def node(nodes: Callable[[str], Node]) -> Node:
    return nodes("a")


def _apply(node: Node, carried: bool = True, damaged: bool = False) -> Merge:
    """Commit the next merge of two records of DIR, carrying its bytes or not."""
    ids = [node.next_id, node.next_id + 1]
    data, _ = encode_batch([b"m%d" % i for i in ids], 1000, ids)
    state = node.machine.state
    start, seq = node.next_start, state.seq + 1
    record, count, _ = build_record(DIR, start, 5, seq, data, None)
    ins = Merge(
        seq=seq,
        position=state.next_position(len(record)),
        dir=DIR,
        start=start,
        end=start + len(data),
        count=count,
        nbytes=len(record),
        crc=zlib.crc32(record),
        ts=5,
        watermark=None,
        data=(bytes(b ^ 1 for b in data) if damaged else data) if carried else None,
    )
    assert node.machine.apply(ins.encode())
    node.next_start, node.next_id = ins.end, node.next_id + 2
    return ins


def test_carried_merges_are_written_by_the_applying_thread_while_the_merger_idles(
    node: Node,
) -> None:
    woken: list[int] = []
    node.merger.on_progress = lambda: woken.append(node.merged.seq)
    for _ in range(3):
        _apply(node)
    assert node.merger.merge_carried() == 3
    assert node.merged.seq == 3 and woken == [3]  # the pull server woken once, after all
    assert node.merger.merged_inline == 3
    assert not node.machine.pending and len(node.machine.unsynced) == 3  # owed a sync
    assert node.merger.digest == node.machine.state.digest


def test_what_is_not_a_carried_merge_at_the_head_is_left_to_the_merger_thread(
    node: Node, nodes: Callable[[str], Node]
) -> None:
    _apply(node)
    _apply(node, carried=False)  # read from this node's input: may wait, fetch from peers
    _apply(node)
    assert node.merger.merge_carried() == 1  # stops at the merge that reads input
    assert node.merged.seq == 1 and len(node.machine.pending) == 2

    busy = nodes("d")
    _apply(busy)
    with busy.merger._turn:  # the merger's thread is carrying something out
        assert busy.merger.merge_carried() == 0
    assert busy.merger.merge_carried() == 1

    other = nodes("b")  # a backlog: more queued than a turn takes
    for _ in range(INLINE_MERGES_MAX + 1):
        _apply(other)
    assert other.merger.merge_carried() == 0 and other.merged.seq == 0
    other.machine.pending.pop()  # one fewer: a turn's worth
    assert other.merger.merge_carried() == INLINE_MERGES_MAX

    third = nodes("c")
    _apply(third, damaged=True)  # bytes that do not build the committed record
    assert third.merger.merge_carried() == 0 and third.merged.seq == 0


def test_the_merged_log_is_the_same_whoever_writes_it(
    nodes: Callable[[str], Node], tmp_path: Path
) -> None:
    """Node a writes half its merges on the applying thread and the merger's thread the
    rest, node b only the merger's thread: the two logs are byte-identical."""
    a, b = nodes("a"), nodes("b")
    for i in range(20):
        for n in (a, b):
            _apply(n)
        if i % 2 == 0:
            a.merger.merge_carried()
    assert a.merger.merged_inline == 19 and b.merger.merged_inline == 0  # 1, 2, 2, ..., 2
    for n in (a, b):
        n.merger.start()
    deadline = time.monotonic() + 10
    while (a.merged.seq, b.merged.seq) != (20, 20) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (a.merged.seq, b.merged.seq) == (20, 20)
    files_a = sorted((tmp_path / "a" / "merged").glob("log.*"))
    files_b = sorted((tmp_path / "b" / "merged").glob("log.*"))
    assert [f.name for f in files_a] == [f.name for f in files_b] and files_a
    assert all(fa.read_bytes() == fb.read_bytes() for fa, fb in zip(files_a, files_b, strict=True))
