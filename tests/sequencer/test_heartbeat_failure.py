"""A sequencer whose heartbeat file cannot be written (a full disk) keeps running and
answering: found by ``rt chaos`` (seed 9: a node's sequencer exited with ENOSPC from the
heartbeat write during a full disk, and stayed down after the room came back)."""

from __future__ import annotations

import pytest

from rt_appliance.nodestatus import NodeStatus
from rt_lab.testing.cluster import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def test_a_heartbeat_that_cannot_be_written_is_not_fatal(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=1)
    # the heartbeat is written to a temporary name first: make that name unwritable
    (stream.data_dir("rt-1") / ".sequencer.json.new").mkdir(parents=True)
    stream.start()
    daemon = stream.daemons["sequencer-rt-1"]
    wait_until(lambda: "cannot write the heartbeat" in daemon.log(), 30, "the warning")
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log()[-3000:]
    assert stream.wait_leader() == "rt-1"
    answer = stream.node_status()["rt-1"]
    assert isinstance(answer, NodeStatus) and answer.has_quorum, answer
    assert daemon.log().count("cannot write the heartbeat") == 1  # once, not every 0.5 s
    (stream.data_dir("rt-1") / ".sequencer.json.new").rmdir()
    wait_until(lambda: "written again" in daemon.log(), 30, "the heartbeat written again")
    assert daemon.proc.poll() is None
