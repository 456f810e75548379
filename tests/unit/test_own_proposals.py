"""A node applies its own committed proposals without decoding them again, and gets the
same state as a node that decodes them: every instruction decodes to an equal one."""

from __future__ import annotations

import dataclasses

import pytest

from rt_appliance.limits import PROPOSED_KEPT
from rt_appliance.log.format import encode_batch
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.state import (
    Lease,
    Merge,
    Prune,
    SequencerState,
    Skip,
    decode_instruction,
)
from tests.unit.test_sequencer_state import ROLL, merge_for

pytestmark = pytest.mark.unit


def _instructions() -> list[Merge | Skip | Prune | Lease]:
    state = SequencerState("s", ROLL)
    plain = merge_for(state, "trades.a", 0, [1, 2])
    carried = dataclasses.replace(plain, data=b"\x00\xffbytes of the input")
    dedup = dataclasses.replace(plain, watermark=7, basis=None)
    return [
        plain,
        carried,
        dedup,
        Skip("trades.a", 10, 20, 3, basis=5),
        Skip("trades.a", 10, 20, 3),
        Prune(2, "age", 9),
        Lease("spark-pipeline", "rt-2", 1, 2),
    ]


def test_every_instruction_decodes_to_an_equal_one() -> None:
    for ins in _instructions():
        decoded = decode_instruction(ins.encode())
        assert decoded == ins
        assert type(decoded) is type(ins)


def test_own_proposals_apply_as_the_decoded_bytes_do() -> None:
    merges = []
    state = SequencerState("s", ROLL)
    for n in range(3):
        merge = merge_for(state, "trades.a", state.inputs.get("trades.a", 0), [n])
        if n % 2:  # the input's bytes carried in the entry, as merge_for made them
            merge = dataclasses.replace(merge, data=encode_batch([b"x%d" % n], 1000, [n])[0])
        state.apply_decoded(merge)
        merges.append(merge)
    own, other = SequencerMachine("s", ROLL), SequencerMachine("s", ROLL)
    for merge in merges:
        command = merge.encode()
        own.proposing(command, merge)
        assert own.apply(command) and other.apply(command)
        assert own.pending[-1].instruction is merge  # not decoded again
        assert own.pending[-1].instruction == other.pending[-1].instruction
    assert own.state.to_json() == other.state.to_json()
    assert own._proposed == {}


def test_proposals_that_never_commit_are_forgotten_oldest_first() -> None:
    machine = SequencerMachine("s", ROLL)
    prunes = [Prune(n, "x", 1) for n in range(PROPOSED_KEPT + 5)]
    for prune in prunes:
        machine.proposing(prune.encode(), prune)
    assert len(machine._proposed) == PROPOSED_KEPT
    assert prunes[0].encode() not in machine._proposed
    assert prunes[-1].encode() in machine._proposed
    # one that fell out is applied from its bytes, as any other node applies it
    fresh = SequencerMachine("s", ROLL)
    assert machine.apply(prunes[0].encode()) == fresh.apply(prunes[0].encode())
    assert machine.state.to_json() == fresh.state.to_json()
