"""A leader asked to stop (SIGTERM: `systemctl stop`, a package upgrade's restart) hands
its leadership to a caught-up follower before it exits, so the stream waits for no
election timeout; merging goes on, and the node rejoins when started again."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import check_stream
from tests.sequencer.test_cluster import committed_seq, merging_under_load

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_stopping_leader_hands_over_and_rejoins(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream, old, feeds = merging_under_load(local_stream)
    daemon = stream.node_daemon(old)
    assert daemon.proc is not None
    daemon.send(signal.SIGTERM)
    try:
        code = daemon.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.send(signal.SIGUSR1)  # every thread's stack to its log
        daemon.send(signal.SIGUSR2)  # every task of its loop
        time.sleep(1)
        pytest.fail(f"{old} did not stop within 20 s of SIGTERM:\n{daemon.log()[-20000:]}")
    assert code == 0  # a clean stop, within the hand-over bound
    log_text = (stream.log_dir / f"sequencer-{old}.log").read_text()
    assert "handing leadership over first" in log_text, log_text[-3000:]
    # handed over, not left to an election: the new leader was named before the exit
    assert "handed leadership over (leader now rt-" in log_text, log_text[-3000:]
    new = stream.wait_leader(10.0, not_in=[old])
    assert f"handed leadership over (leader now {new})" in log_text
    before = committed_seq(stream, new)
    wait_until(lambda: committed_seq(stream, new) > before + 5, 30, "merging to go on")

    stream.start_node(old)
    target = committed_seq(stream, new)
    wait_until(
        lambda: committed_seq(stream, old) >= target, 60, f"{old} to catch up\n{stream.logs()}"
    )
    for f in feeds:
        f.stop()
    check_stream(stream, feeds)
