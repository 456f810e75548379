"""A node whose disk is lost is rebuilt from nothing while publishing goes on
(docs/OPERATIONS.md, "Replacing a dead node"): a new key and certificate from
`rt certs issue --force`, an empty data directory, `rt node`. It joins the stream with
its history (no vote until its raft log holds what was committed), fetches the merged
log from its peers, and ends byte-identical; then it votes again, so the stream survives
losing another node."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest

from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import check_stream
from tests.sequencer.test_cluster import committed_seq, merging_under_load

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_node_rebuilt_from_an_empty_disk_joins_and_votes_again(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream, leader, feeds = merging_under_load(local_stream)
    lost = next(n for n in stream.node_names if n != leader)
    stream.kill_node(lost, signal.SIGKILL)
    shutil.rmtree(stream.data_dir(lost))  # the disk is gone
    key = stream.config.tls.key(lost)
    tls, old_key = key.parent, key.read_bytes()
    subprocess.run(
        [sys.executable, "-m", "rt_appliance.cli", "certs", "issue", "--config",
         str(stream.config_path), "--host", lost, "--ca-dir", str(tls), "--force"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert key.read_bytes() != old_key
    wait_until(lambda: committed_seq(stream, leader) > 60, 30, "merging without it")
    stream.start_node(lost)

    log_path = stream.log_dir / f"sequencer-{lost}.log"
    wait_until(
        lambda: "caught up to commit" in log_path.read_text(),
        60,
        f"{lost} to join and catch up\n{stream.logs()}",
    )
    text = log_path.read_text()
    assert "starts with no raft state" in text
    assert "joining a stream with a history" in text
    target = committed_seq(stream, leader)
    wait_until(lambda: committed_seq(stream, lost) >= target, 60, f"{lost} to merge")

    # It votes again: with the old leader gone, it and the third node elect one of them.
    stream.kill_node(leader, signal.SIGKILL)
    new = stream.wait_leader(30.0, not_in=[leader])
    before = committed_seq(stream, new)
    wait_until(lambda: committed_seq(stream, new) > before + 5, 30, "merging on two nodes")
    stream.start_node(leader)
    for f in feeds:
        f.stop()
    check_stream(stream, feeds)
