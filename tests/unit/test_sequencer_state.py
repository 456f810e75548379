"""The replicated state: deterministic apply, rejection of anything that does not fit."""

from __future__ import annotations

import dataclasses
import json
import pickle
import zlib

import pytest

from rt_appliance.config.model import ArchiverConfig
from rt_appliance.errors import RTError
from rt_appliance.log.format import encode_batch
from rt_appliance.position import Position
from rt_appliance.sequencer.archiver import Disk, MergedFile, decide
from rt_appliance.sequencer.inputs import Records, filter_records
from rt_appliance.sequencer.merger import _matches, _rebuild, build_record
from rt_appliance.sequencer.planner import majority_extent
from rt_appliance.sequencer.raft import restricted_loads
from rt_appliance.sequencer.raft.vote import Vote, VoteStore
from rt_appliance.sequencer.state import (
    Merge,
    Prune,
    SequencerState,
    Skip,
    chain_digest,
    decode_instruction,
)

pytestmark = pytest.mark.unit

ROLL = 1 << 20


def merge_for(state: SequencerState, dir_name: str, start: int, ids: list[int]) -> Merge:
    """The merge a leader would propose for records with ``ids`` at ``start``."""
    data, _ = encode_batch([b"x%d" % i for i in ids], 1000, ids)
    watermark = state.watermark_of(dir_name)
    record, count, after = build_record(dir_name, start, 5, state.seq + 1, data, watermark)
    return Merge(
        seq=state.seq + 1,
        position=state.next_position(len(record)),
        dir=dir_name,
        start=start,
        end=start + len(data),
        count=count,
        nbytes=len(record),
        crc=zlib.crc32(record),
        ts=5,
        watermark=after,
        basis=watermark,
    )


def test_merges_apply_in_order_and_chain_the_digest() -> None:
    a, b = SequencerState("s", ROLL), SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    m1 = merge_for(a, "trades.pub-1", start, [1, 2, 3])
    for s in (a, b):
        assert s.apply(m1.encode()) == m1
    m2 = merge_for(a, "trades.pub-1", m1.end, [4])
    for s in (a, b):
        assert s.apply(m2.encode()) == m2
    assert a.to_json() == b.to_json()
    assert a.seq == 2 and a.inputs["trades.pub-1"] == m2.end
    assert a.end == m2.position + m2.nbytes
    expected = chain_digest(
        chain_digest("0" * 64, 1, m1.position, m1.nbytes, m1.crc), 2, m2.position, m2.nbytes, m2.crc
    )
    assert a.digest == expected


def test_a_stale_or_malformed_command_is_rejected_and_changes_nothing() -> None:
    s = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    m1 = merge_for(s, "trades.pub-1", start, [1])
    assert s.apply(m1.encode()) is not None
    before = s.to_json()
    for bad in [
        m1.encode(),  # the same seq again
        b"\x80garbage",
        b"[]",
        b'{"t": "merge"}',
        b'{"t": "launch"}',
        Merge(**{**_fields(m1), "seq": 2, "position": m1.position}).encode(),  # overlaps
        Merge(**{**_fields(m1), "seq": 2, "position": s.end, "start": start}).encode(),  # re-merge
        Prune(below=5, reason="x", ts=1).encode(),  # would prune the newest file
        Skip("trades.pub-1", m1.end, m1.end + 40, 1).encode(),  # not a .dedup input
        Merge(**{**_fields(m1), "seq": 2, "position": s.end, "start": m1.end, "count": 0}).encode(),
    ]:
        assert s.apply(bad) is None
        assert s.rejected > 0
    after = s.to_json()
    assert {k: v for k, v in after.items() if k not in ("rejected", "last_reject")} == {
        k: v for k, v in before.items() if k not in ("rejected", "last_reject")
    }


def _fields(m: Merge) -> dict[str, object]:
    return {name: getattr(m, name) for name in m.__slots__}


def test_a_merge_that_does_not_fit_the_file_goes_to_the_next_roll() -> None:
    s = SequencerState("s", 4096)
    start = int(Position.of(1, 0, 64))
    m1 = merge_for(s, "trades.pub-1", start, list(range(1, 60)))
    s.apply(m1.encode())
    m2 = merge_for(s, "trades.pub-1", m1.end, list(range(60, 140)))
    assert Position(m2.position).roll == 1
    assert Position(m2.position).offset == s.header_bytes
    assert s.apply(m2.encode()) is not None


def test_dedup_watermark_drops_what_was_merged() -> None:
    s = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    m1 = merge_for(s, "quotes.dedup.pub-1", start, [1, 2, 3])
    assert m1.watermark == 3 and m1.count == 3
    s.apply(m1.encode())
    other = int(Position.of(1, 0, 64))
    m2 = merge_for(s, "quotes.dedup.pub-2", other, [2, 3, 4, 5])
    assert m2.count == 2 and m2.watermark == 5  # 2 and 3 were merged from pub-1
    assert s.apply(m2.encode()) is not None
    assert s.watermarks == {"quotes.dedup": 5}
    m3 = merge_for(s, "quotes.dedup.pub-1", m1.end, [4, 5])
    assert m3.count == 0 and m3.watermark == 5  # a replay: nothing new...
    skip = Skip(m3.dir, m3.start, m3.end, 9, basis=5)  # ...so the leader proposes a skip
    seq = s.seq
    assert s.apply(skip.encode()) == skip
    assert s.inputs["quotes.dedup.pub-1"] == m3.end and s.seq == seq  # no merged record
    assert s.apply(skip.encode()) is None  # the same range again: already merged


DEDUP_A, DEDUP_B = "quotes.dedup.pub-a", "quotes.dedup.pub-b"


def test_a_skip_planned_on_a_merge_that_was_rejected_is_rejected_too() -> None:
    """A leader plans on its proposals in flight: it merges pub-a's ids 1..3, then finds
    pub-b's same ids already merged and proposes a skip. If the merge is rejected (say a
    proposal before it failed and its seq no longer fits), the skip must not apply:
    nobody merged those ids, and skipping them would lose them for good."""
    committed = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    planned = committed.copy()
    merge_a = merge_for(planned, DEDUP_A, start, [1, 2, 3])
    assert planned.apply(merge_a.encode()) is not None
    replay = merge_for(planned, DEDUP_B, start, [1, 2, 3])
    assert replay.count == 0
    skip_b = Skip(DEDUP_B, replay.start, replay.end, 9, basis=planned.watermark_of(DEDUP_B))

    stale = Merge(**{**_fields(merge_a), "seq": 7})  # the merge, rejected as it arrives
    assert committed.apply(stale.encode()) is None
    assert committed.apply(skip_b.encode()) is None
    assert "watermark 3" in committed.last_reject
    assert DEDUP_B not in committed.inputs

    # replanned from the committed state, pub-b's copy of the ids is merged
    again = merge_for(committed, DEDUP_B, start, [1, 2, 3])
    assert again.count == 3 and committed.apply(again.encode()) == again
    assert committed.watermarks == {"quotes.dedup": 3}


def test_a_merge_filtered_against_another_watermark_is_rejected() -> None:
    s = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    assumed = s.copy()
    assumed.watermarks["quotes.dedup"] = 2  # a proposal that never committed raised it
    merge_b = merge_for(assumed, DEDUP_B, start, [1, 2, 3, 4])
    assert merge_b.count == 2 and merge_b.basis == 2
    assert s.apply(merge_b.encode()) is None
    assert "filtered against watermark 2" in s.last_reject
    assert s.apply(merge_for(s, DEDUP_B, start, [1, 2, 3, 4]).encode()) is not None


def test_an_instruction_written_before_the_basis_field_applies_as_it_did() -> None:
    """A node replaying its raft journal after an upgrade decides as before."""
    s = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    merge_a = merge_for(s, DEDUP_A, start, [1, 2])
    old = {k: v for k, v in _fields(merge_a).items() if k != "basis"}
    assert s.apply(json.dumps({"t": "merge", **old}).encode()) is not None
    skip = {"t": "skip", "dir": DEDUP_B, "start": start, "end": start + 40, "ts": 1}
    assert s.apply(json.dumps(skip).encode()) is not None
    assert s.inputs[DEDUP_B] == start + 40


def test_decode_instruction_names_the_problem() -> None:
    assert "not JSON" in str(decode_instruction(b"{"))
    assert "fields" in str(decode_instruction(b'{"t": "prune", "below": 1}'))
    assert "integer" in str(
        decode_instruction(b'{"t": "prune", "below": "1", "reason": "r", "ts": 1}')
    )


def test_majority_extent() -> None:
    assert majority_extent([10, 20, 30], 3) == 20
    assert majority_extent([30], 3) == 0  # one report of three: no majority
    assert majority_extent([5, 9], 3) == 5
    assert majority_extent([7], 1) == 7
    assert majority_extent([1, 2, 3, 4, 5], 5) == 3


def test_filter_records_keeps_ids_above_the_watermark() -> None:
    data, sizes = encode_batch([b"a", b"b", b"c"], 1, [5, 6, 7])
    offsets = [0, sizes[0], sizes[0] + sizes[1]]
    records = Records(Position(64), Position(64 + len(data)), data, [5, 6, 7], offsets, 1)
    assert filter_records(records, None) == (data, 3, None)
    kept, count, high = filter_records(records, 5)
    assert count == 2 and high == 7 and kept == data[sizes[0] :]
    assert filter_records(records, 9) == (b"", 0, 9)


def test_restricted_loads_refuses_every_global() -> None:
    assert restricted_loads(pickle.dumps({"a": [1, (b"x", None)]}, protocol=4)) == {
        "a": [1, (b"x", None)]
    }

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    with pytest.raises(pickle.UnpicklingError, match="refused"):
        restricted_loads(pickle.dumps(Evil()))


def test_archiver_rules() -> None:
    files = [MergedFile(r, r * 60_000_000_000, 100) for r in range(5)]  # a file per minute
    now = 5 * 60_000_000_000
    disk = Disk(1000, 100)
    assert decide(files, now, disk, ArchiverConfig()) is None
    below, reason = decide(files, now, disk, ArchiverConfig(retention_minutes=2.5)) or (0, "")
    assert below == 3 and "older" in reason  # rolls 0..2 start before minute 2.5
    below, reason = decide(files, now, disk, ArchiverConfig(max_log_bytes=250)) or (0, "")
    assert below == 3 and "merged log" in reason  # 500 bytes -> at most 250 kept
    below, reason = decide(files, now, Disk(1000, 950), ArchiverConfig()) or (0, "")
    assert below == 1 and "disk" in reason  # 950 > 900: one 100-byte file
    # never the newest, whatever the rule says
    below, _ = decide(files, now, disk, ArchiverConfig(retention_minutes=0.001)) or (0, "")
    assert below == 4
    assert decide(files[:1], now, Disk(1000, 999), ArchiverConfig()) is None


def test_holds_cap_age_and_size_rules_but_not_the_disk_rule() -> None:
    files = [MergedFile(r, r * 60_000_000_000, 100) for r in range(5)]
    now, disk = 5 * 60_000_000_000, Disk(1000, 100)
    old = ArchiverConfig(retention_minutes=2.5)  # alone it prunes below 3
    below, reason = decide(files, now, disk, old, hold_roll=1) or (0, "")
    assert below == 1 and "up to the hold at roll 1" in reason
    assert decide(files, now, disk, old, hold_roll=0) is None  # nothing committed yet
    assert (decide(files, now, disk, old, hold_roll=4) or (0, ""))[0] == 3  # hold is ahead
    below, reason = decide(files, now, Disk(1000, 990), ArchiverConfig(), hold_roll=0) or (0, "")
    assert below == 1 and "overriding the hold at roll 0" in reason  # a full disk wins


def test_only_the_raft_module_imports_pysyncobj() -> None:
    import re
    from pathlib import Path

    import rt_appliance

    root = Path(rt_appliance.__file__).parent
    importers = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if re.search(r"^\s*(import|from)\s+pysyncobj", p.read_text(), re.M)
    ]
    assert importers and all(p.startswith("sequencer/raft/") for p in importers), importers


def test_every_syncobjconf_option_is_set_explicitly() -> None:
    import inspect
    import re

    from rt_appliance.sequencer.raft import node

    options = set(re.findall(r"kwargs\.get\('(\w+)'", inspect.getsource(node.SyncObjConf)))
    body = inspect.getsource(node._conf)
    given = set(re.findall(r"^\s+(\w+)=", body, re.M))
    assert options and options == given


def test_a_merge_that_leaves_a_gap_in_its_input_is_rejected() -> None:
    s = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    m1 = merge_for(s, "trades.pub-1", start, [1, 2])
    assert s.apply(m1.encode()) is not None
    skipped = merge_for(s, "trades.pub-1", m1.end + 32, [4])  # record 3 left out
    assert s.apply(skipped.encode()) is None
    assert "gap" in s.last_reject


@pytest.mark.parametrize("dir_name", ["trades.pub-1", "orders.dedup.pub-1"])
def test_a_node_rebuilds_the_committed_record_and_notices_damaged_input(dir_name: str) -> None:
    state = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    ids = [1, 2, 3, 4]
    data, _ = encode_batch([b"x%d" % i for i in ids], 1000, ids)
    ins = merge_for(state, dir_name, start, ids)
    watermark = state.watermark_of(dir_name)
    record = _rebuild(ins, data, watermark)
    assert _matches(record, ins)
    assert record == build_record(dir_name, start, 5, ins.seq, data, watermark)[0]
    for where in (0, 30, len(data) - 1):  # a CRC field, a header, the last payload byte
        damaged = bytearray(data)
        damaged[where] ^= 0x01
        assert not _matches(_rebuild(ins, bytes(damaged), watermark), ins)
    assert not _matches(_rebuild(ins, data[:-1], watermark), ins)  # a torn last record


def test_vote_store_keeps_term_and_vote_across_opens(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = VoteStore(tmp_path)
    assert store.saved == Vote(0, None)  # a node that never voted
    store.save(Vote(7, "127.0.0.2:7100"))
    assert VoteStore(tmp_path).saved == Vote(7, "127.0.0.2:7100")
    store.save(Vote(8, None))
    assert VoteStore(tmp_path).load() == Vote(8, None)
    assert not (tmp_path / "raft.vote.tmp").exists()


@pytest.mark.parametrize("text", ["", "{", '{"term": -1, "voted_for": null}', '{"term": 3}'])
def test_an_unreadable_vote_file_stops_the_node_with_a_clear_error(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "raft.vote").write_text(text)
    with pytest.raises(RTError, match=r"raft\.vote is unreadable.*move the file away"):
        VoteStore(tmp_path)


def test_a_merge_carrying_its_input_applies_only_with_exactly_those_bytes() -> None:
    """The bytes a merge carries travel base64 in the JSON entry, and must be exactly the
    range's input, within one file; a merge without them encodes as releases before
    carried input wrote it (no ``data`` key), so their nodes still apply it."""
    s = SequencerState("s", ROLL)
    start = int(Position.of(1, 0, 64))
    plain = merge_for(s, "trades.pub-1", start, [1, 2])
    assert b'"data"' not in plain.encode()
    data, _ = encode_batch([b"x%d" % i for i in (1, 2)], 1000, [1, 2])
    carried = dataclasses.replace(plain, data=data)
    decoded = decode_instruction(carried.encode())
    assert decoded == carried
    short = dataclasses.replace(plain, data=data[:-1])
    state = SequencerState("s", ROLL)
    assert state.apply(short.encode()) is None and "carries" in state.last_reject
    assert SequencerState("s", ROLL).apply(carried.encode()) is not None
    not_base64 = carried.encode().replace(b'"data":"', b'"data":"!')
    assert "base64" in str(decode_instruction(not_base64))
    # every node builds the same record from the carried bytes as from its own copy
    record = _rebuild(carried, data, None)
    assert _matches(record, carried)
