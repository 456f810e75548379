"""A node sent a snapshot whose merged seq lies in files every node has pruned starts its
merged log at what the others keep, instead of asking forever for records no node has.

The merged files are a real stream's (one node, the archiver pruning its oldest files);
the node that copies them is a Merger of its own whose peers answer FETCH from those
files (the server side's own ``read_part``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rt_appliance.config import load_config
from rt_appliance.log.format import decode_file_header
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import Fetched, read_part
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merged import MergedLog, parse_merged_records
from rt_appliance.sequencer.merger import Merger
from rt_lab.testing.cluster import wait_until, write_local_config
from rt_lab.testing.stream import LocalStream
from tests.sequencer.conftest import Feed

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class _Peers:
    """Every peer answers FETCH of the merged log from ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def fetch(self, node: str, dir: str, position: Position, max_bytes: int, **_: Any) -> Fetched:
        assert dir == "merged"
        return read_part(self.directory, Position.parse(position), max_bytes)

    def close(self) -> None:
        return None


def _pruned_stream(work: Path) -> Path:
    """A one-node stream's merged log whose oldest files were pruned."""
    extra = {
        "sequencer": {"merged_roll_bytes": "1MiB", "max_range_bytes": "64KiB"},
        "archiver": {"max_log_bytes": "2MiB", "interval_ms": 200},
    }
    stream = LocalStream(work, nodes=1, extra=extra)
    try:
        stream.start()
        stream.wait_leader()
        feed = Feed(stream, "pub-1", "trades")
        feed.payload_bytes = 200
        feed.publish(1, 20_000)  # about 4.5 MiB merged: files 0.. pruned, 2 MiB kept
        merged = stream.merged_dir("rt-1")
        # (the merged directory is empty until the merger's first file)
        wait_until(
            lambda: any(f.roll >= 2 for f in list_files(merged)[:1]), 60, "the archiver to prune"
        )
    finally:
        stream.stop()
    return merged


def test_a_snapshot_target_pruned_everywhere_starts_the_log_at_what_is_kept(
    tmp_path: Path,
) -> None:
    source = _pruned_stream(tmp_path / "source")
    oldest = list_files(source)[0]
    body = oldest.path.read_bytes()
    header = decode_file_header(body[:1024])
    assert not isinstance(header, str), header
    first = parse_merged_records(body[header.header_bytes :], header.header_bytes)[0][0].seq
    assert first > 10

    config = load_config(write_local_config(tmp_path / "node", nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    with machine.cond:  # what a snapshot sent by the leader left: merged to first - 5
        machine.state.seq = first - 5  # in a file no node keeps
        machine.state.pruned_below = oldest.roll
    merged = MergedLog(tmp_path / "node" / "merged")
    merger = Merger(
        config,
        "rt-3",
        machine,
        merged,
        Inputs(tmp_path / "node" / "in", sync=False),
        _Peers(source),  # type: ignore[arg-type]
        tmp_path / "node" / "log-history.jsonl",
    )
    try:
        merger._copy_stretch(first - 5)
        assert merged.seq >= first  # past the target: it starts at what is kept
        copied = list_files(merged.directory)
        assert [f.roll for f in copied] == [oldest.roll]
        mine = copied[0].path.read_bytes()
        assert len(mine) > header.header_bytes and body.startswith(mine)  # byte for byte
    finally:
        merged.close()
