"""The scrubber repairs a merged file whose damage lies before where the walk stops.

A cut in the middle of a record, with a length field that carries the walk to a
boundary of this file's own, makes the walk report damage at a place no peer's bytes
fit. Found by ``rt chaos`` (seed 149131534): a node's newest merged file, cut while it
ran, was "repaired" there from both peers again and again, never checking out, and the
node fell behind for good. The repair now falls back to the whole file from a peer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_appliance.position import Position
from rt_appliance.replicate.fetch import Fetched
from rt_appliance.sequencer.merged import MergedLog
from rt_appliance.sequencer.scrub import Scrubber
from rt_appliance.sequencer.state import merged_header
from tests.helpers import merged_records

pytestmark = pytest.mark.unit

STREAM = "teststream"


def _peer_fetch(peer_file: Path):  # type: ignore[no-untyped-def]
    def fetch(peer: str, position: Position, max_bytes: int) -> Fetched:
        data = peer_file.read_bytes()
        size = len(data)
        return Fetched(position, data[position.offset : position.offset + max_bytes], size, None,
                       Position.of(1, 0, 0), missing=False)  # fmt: skip

    return fetch


def test_a_cut_behind_a_boundary_of_this_files_own_is_repaired_from_the_start(
    tmp_path: Path,
) -> None:
    header = merged_header(STREAM, 0, 1)
    peer = tmp_path / "peer" / "log.1.0"
    peer.parent.mkdir()
    peer.write_bytes(header + merged_records([300, 300, 300, 300, 300, 300]))
    # this node's file went its own way early on (records of other sizes, each valid),
    # then was cut in the middle of a record
    own = header + merged_records([450, 450, 450, 450])
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    (local_dir / "log.1.0").write_bytes(own[: len(own) - 200])
    merged = MergedLog(local_dir)
    merged.size = peer.stat().st_size  # what the merger had written, as the peers hold it
    scrubber = Scrubber(merged, _peer_fetch(peer), ["rt-2"], interval_s=0.0)

    damage = scrubber.step()

    assert damage is not None
    assert (local_dir / "log.1.0").read_bytes() == peer.read_bytes()
    assert scrubber.repaired == 1
    assert scrubber.inspect(merged.files()[0], True) is None
    merged.close()


def test_damage_where_the_peers_bytes_fit_is_repaired_there(tmp_path: Path) -> None:
    header = merged_header(STREAM, 0, 1)
    whole = header + merged_records([300, 300, 300, 300])
    peer = tmp_path / "peer" / "log.1.0"
    peer.parent.mkdir()
    peer.write_bytes(whole)
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    (local_dir / "log.1.0").write_bytes(whole[: len(whole) - 100])  # a plain torn tail
    merged = MergedLog(local_dir)  # cuts the torn tail on open
    merged.size = len(whole)
    fetched: list[int] = []
    fetch = _peer_fetch(peer)

    def counting(peer_name: str, position: Position, max_bytes: int) -> Fetched:
        fetched.append(position.offset)
        return fetch(peer_name, position, max_bytes)  # type: ignore[no-any-return]

    scrubber = Scrubber(merged, counting, ["rt-2"], interval_s=0.0)
    assert scrubber.step() is not None
    assert (local_dir / "log.1.0").read_bytes() == whole
    assert min(fetched) > len(header)  # from the damage on, not the whole file
    merged.close()
