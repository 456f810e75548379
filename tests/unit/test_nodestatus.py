"""NodeStatus from a node's STATUS answer, and the document ``rt status --json`` prints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rt_appliance.nodestatus import (
    Answer,
    InputStatus,
    NodeStatus,
    Unreachable,
    leader_of,
    status_document,
)

pytestmark = pytest.mark.unit


def _answer(name: str, role: str, leader: str | None, **over: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "name": name,
        "role": role,
        "leader": leader,
        "term": 3,
        "commit_index": 40,
        "has_quorum": True,
        "merged_seq": 12,
        "merged_position": 4096,
        "digest": "ab" * 16,
        "committed_seq": 12,
        "halted": None,
        "inputs": {"trades.pub-1": {"held": 900, "merged": 900, "lag_bytes": 0}},
        "disk": {"total_bytes": 100, "used_bytes": 25, "used_percent": 25.0},
        "holds": {},
    }
    return answer | over


def test_from_dict_reads_every_field_and_keeps_the_answer() -> None:
    raw = _answer("rt-1", "leader", "rt-1")
    status = NodeStatus.from_dict(raw)
    assert (status.name, status.role, status.leader, status.term) == ("rt-1", "leader", "rt-1", 3)
    assert (status.commit_index, status.committed_seq, status.merged_seq) == (40, 12, 12)
    assert (status.merged_position, status.digest, status.has_quorum) == (4096, "ab" * 16, True)
    assert status.inputs == {"trades.pub-1": InputStatus(900, 900, 0)}
    assert status.disk_used_percent == 25.0 and status.halted is None
    assert status.raw is raw and status.is_leader and status.all_merged and status.gaps == []
    assert status.not_voting is None  # an older release sends no such field
    joining = NodeStatus.from_dict(_answer("rt-2", "follower", "rt-1", not_voting="joining"))
    assert joining.not_voting == "joining"


def test_missing_numbers_are_zero_and_the_asked_name_is_used() -> None:
    status = NodeStatus.from_dict({"role": "candidate"}, "rt-2")
    assert (status.name, status.term, status.merged_seq, status.leader) == ("rt-2", 0, 0, None)
    assert status.inputs == {} and status.holds == {}


def test_unmerged_input_or_unwritten_commits_are_not_all_merged() -> None:
    lagging = _answer("rt-1", "follower", "rt-2", inputs={"q.pub-2": {"lag_bytes": 128}})
    behind = _answer("rt-1", "follower", "rt-2", committed_seq=13)
    assert not NodeStatus.from_dict(lagging).all_merged
    assert not NodeStatus.from_dict(behind).all_merged


def test_a_hold_with_a_gap_is_reported() -> None:
    holds = {"spark-pipeline": {"position": 0, "behind_bytes": 0, "gap": "merged 1 pruned"}}
    assert NodeStatus.from_dict(_answer("rt-1", "leader", "rt-1", holds=holds)).gaps == [
        "merged 1 pruned"
    ]


def test_the_leader_is_the_one_the_leaders_name() -> None:
    one: dict[str, Answer] = {
        "rt-1": NodeStatus.from_dict(_answer("rt-1", "follower", "rt-2")),
        "rt-2": NodeStatus.from_dict(_answer("rt-2", "leader", "rt-2")),
        "rt-3": Unreachable("rt-3", "cannot connect"),
    }
    assert leader_of(one) == "rt-2"
    two = one | {"rt-1": NodeStatus.from_dict(_answer("rt-1", "leader", "rt-1"))}
    assert leader_of(two) is None
    assert leader_of({"rt-3": Unreachable("rt-3", "TimeoutError")}) is None


def test_the_document_is_what_rt_status_json_prints() -> None:
    raw = _answer("rt-1", "leader", "rt-1")
    answers: dict[str, Answer] = {
        "rt-1": NodeStatus.from_dict(raw),
        "rt-2": Unreachable("rt-2", "TimeoutError"),
    }
    doc = status_document("demo", answers)
    assert doc == {
        "stream": "demo",
        "leader": "rt-1",
        "nodes": [
            {"reachable": True, "error": None, **raw},
            {"name": "rt-2", "reachable": False, "error": "TimeoutError"},
        ],
    }
    assert list(doc["nodes"][0])[:3] == ["reachable", "error", "name"]  # the order printed
    json.dumps(doc)
