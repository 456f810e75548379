"""Leases granted through raft: the instruction, the leader's decisions, a job's view."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rt_appliance.sequencer import leases
from rt_appliance.sequencer.leases import LeaderWants, LeaseView, decide
from rt_appliance.sequencer.state import Lease, SequencerState, decode_instruction

S = 1_000_000_000  # ns in a second
TTL = 10 * S


def _state() -> SequencerState:
    return SequencerState("trades", 1 << 20)


def test_a_lease_round_trips_through_its_encoding() -> None:
    lease = Lease("spark-pipeline", "rt-2", 5 * S, 15 * S)
    assert decode_instruction(lease.encode()) == lease


def test_malformed_leases_are_refused_by_decoding() -> None:
    assert "is not a string" in str(
        decode_instruction(b'{"t":"lease","name":1,"holder":"rt-1","ts":1,"until":2}')
    )
    assert "is not an integer" in str(
        decode_instruction(b'{"t":"lease","name":"x","holder":"rt-1","ts":"1","until":2}')
    )
    assert "fields" in str(decode_instruction(b'{"t":"lease","name":"x","holder":"rt-1"}'))


def test_a_held_lease_is_not_granted_to_another_node_until_it_expires() -> None:
    state = _state()
    assert state.apply(Lease("p", "rt-1", 0, TTL).encode()) is not None
    assert state.lease_holder("p", TTL - 1) == "rt-1"
    # rt-2 while rt-1's has not expired, by the proposer's clock: refused, identically
    assert state.apply(Lease("p", "rt-2", TTL - 1, 2 * TTL).encode()) is None
    assert "is rt-1's until" in state.last_reject
    assert state.leases["p"]["holder"] == "rt-1"
    # at expiry it can go to rt-2
    assert state.apply(Lease("p", "rt-2", TTL, 2 * TTL).encode()) is not None
    assert state.leases["p"] == {"holder": "rt-2", "until": 2 * TTL, "since": TTL, "grants": 2}


def test_a_renewal_keeps_since_and_counts_no_new_grant() -> None:
    state = _state()
    state.apply(Lease("p", "rt-1", 0, TTL).encode())
    state.apply(Lease("p", "rt-1", 6 * S, 16 * S).encode())
    assert state.leases["p"] == {"holder": "rt-1", "until": 16 * S, "since": 0, "grants": 1}
    state.apply(Lease("p", "rt-1", 16 * S, 16 * S).encode())  # given up: until == ts
    assert state.lease_holder("p", 16 * S) is None


def test_leases_survive_a_snapshot_and_are_left_out_when_there_are_none() -> None:
    state = _state()
    assert "leases" not in state.to_json()  # an older release restores this snapshot
    state.apply(Lease("p", "rt-3", 0, TTL).encode())
    restored = SequencerState.from_json(state.to_json())
    assert restored.leases == state.leases
    assert restored.lease_holder("p", 1) == "rt-3"


def test_an_invalid_lease_is_rejected() -> None:
    state = _state()
    assert state.apply(Lease("p", "rt-1", 10, 5).encode()) is None
    assert "before ts" in state.last_reject
    assert state.apply(Lease("", "rt-1", 0, 5).encode()) is None
    assert state.leases == {}


def test_the_leader_grants_a_free_lease_to_the_first_node_wanting_it() -> None:
    assert decide({}, {"rt-3": ["p"], "rt-2": ["p"]}, 0, TTL) == [Lease("p", "rt-2", 0, TTL)]
    assert decide({}, {}, 0, TTL) == []


def test_the_leader_renews_only_past_half_the_term_and_only_for_a_holder_wanting_it() -> None:
    held = {"p": {"holder": "rt-1", "until": TTL, "since": 0, "grants": 1}}
    wanting = {"rt-1": ["p"], "rt-2": ["p"]}
    assert decide(held, wanting, 4 * S, TTL) == []
    assert decide(held, wanting, 6 * S, TTL) == [Lease("p", "rt-1", 6 * S, 16 * S)]
    # the holder's node stopped asking (dead, or its job stopped): no renewal, no grant
    assert decide(held, {"rt-2": ["p"]}, 6 * S, TTL) == []
    # expired: the others get it, the last holder first if it still wants it
    assert decide(held, {"rt-2": ["p"]}, TTL, TTL) == [Lease("p", "rt-2", TTL, 2 * TTL)]
    assert decide(held, {"rt-3": ["p"], "rt-1": ["p"]}, TTL, TTL) == [
        Lease("p", "rt-1", TTL, 2 * TTL)
    ]


def test_the_leader_forgets_wants_of_a_node_that_stopped_reporting() -> None:
    wants = LeaderWants("rt-1", fresh_s=3.0)
    wants.report("rt-2", ["p"], now=100.0)
    wants.report("rt-3", [], now=100.0)
    assert wants.wanting(["p"], 101.0) == {"rt-1": ["p"], "rt-2": ["p"]}
    assert wants.wanting([], 104.0) == {}


def test_a_job_wants_by_touching_and_stops_wanting_when_it_stops(tmp_path: Path) -> None:
    leases.want(tmp_path, "p")
    assert leases.read_wants(tmp_path) == ["p"]
    stale = time.time() - leases.WANT_FRESH_S - 1
    os.utime(leases.want_file(tmp_path, "p"), (stale, stale))
    assert leases.read_wants(tmp_path) == []  # a job that died
    leases.want(tmp_path, "p")
    leases.give_up(tmp_path, "p")
    assert leases.read_wants(tmp_path) == []
    assert leases.read_wants(tmp_path / "nowhere") == []
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "leases").write_text("not a directory")
    assert leases.read_wants(tmp_path / "file") == []


def test_a_job_trusts_its_lease_until_a_margin_before_it_expires(tmp_path: Path) -> None:
    view = LeaseView(tmp_path, "rt-2", "p", ttl_s=8.0)  # margin 2 s
    assert view.state().holder is None  # nothing written yet
    leases.write_lease(tmp_path, "p", {"holder": "rt-2", "until": 110 * S})
    assert view.state(now=100.0).trust_s == 8.0
    assert view.state(now=108.5).trust_s == 0.0  # within the margin: stop now
    assert view.state(now=108.5).holder == "rt-2"
    assert view.state(now=111.0).holder is None  # expired
    other = LeaseView(tmp_path, "rt-1", "p", ttl_s=8.0)
    assert other.state(now=100.0) == leases.LeaseState("rt-2", 0.0)
    leases.lease_file(tmp_path, "p").write_text("{not json")
    assert view.state(now=100.0).holder is None  # torn or damaged: not trusted


def test_two_writers_of_one_hold_never_take_each_others_file(tmp_path: Path) -> None:
    """The pipeline's driver and Spark's source (another process, here a thread) both
    move the pipeline's hold; neither may find its temporary file renamed away."""
    import threading

    from rt_appliance.sequencer.holds import hold_path, read_holds, write_hold

    path = hold_path(tmp_path, "spark-pipeline")
    failures: list[BaseException] = []

    def write(first: int) -> None:
        try:
            for n in range(first, first + 200):
                write_hold(path, n)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(k * 1000,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert read_holds(tmp_path)[0].position in (1199, 2199)
    assert sorted(p.name for p in path.parent.iterdir()) == ["spark-pipeline.json"]
