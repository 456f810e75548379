"""A leader whose disk fills steps down: another node leads, merging goes on, and the
old leader rejoins and catches up once it has room again.

Needs root: each node's data directory is a tmpfs of its own, and the leader's is
filled with a ballast file to a real ENOSPC.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream
from tests.sequencer.conftest import SMALL, Feed, check_stream
from tests.sequencer.test_cluster import TWO, committed_seq

pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.slow]

TMPFS_SIZE = "96m"


UNREACHABLE = object()


def _node_field(stream: LocalStream, node: str, field: str) -> object:
    for n in stream.status()["nodes"]:
        if n["name"] == node and n["reachable"]:
            return n.get(field)
    return UNREACHABLE


def _fill(mount: Path) -> Path:
    """Write a ballast file into ``mount`` until the filesystem is full (ENOSPC)."""
    ballast = mount / "ballast"
    chunk = b"\0" * (1 << 20)
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return ballast
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


@pytest.fixture
def tmpfs_stream(local_stream) -> Iterator[LocalStream]:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs per node for a real ENOSPC")
    stream = local_stream(nodes=3, publishers=TWO, extra=SMALL)
    mounts: list[Path] = []
    try:
        for node in stream.node_names:
            data = stream.data_dir(node)
            data.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(data)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                pytest.skip(f"cannot mount tmpfs here: {done.stderr.strip()}")
            mounts.append(data)
        yield stream
    finally:
        stream.stop()
        for data in mounts:
            subprocess.run(["umount", "-l", str(data)], check=False)


def test_a_leader_whose_disk_fills_steps_down_and_rejoins(tmpfs_stream: LocalStream) -> None:
    stream = tmpfs_stream.start()
    old = stream.wait_leader()
    feeds = [
        Feed(stream, "pub-1", "trades").start(500),
        Feed(stream, "pub-2", "quotes").start(500),
    ]
    wait_until(lambda: committed_seq(stream, old) > 5, 30, "merging under load")
    ballast = _fill(stream.data_dir(old))
    # Without stepping down the full leader stays leader and nothing merges for as long
    # as its disk is full; with it another node leads within about an election.
    new = stream.wait_leader(10.0, not_in=[old])
    # The old leader says why, in its log and its metrics. It steps down, handing its
    # leadership over; or, when its raft journal needs room first, its event loop waits
    # for room and the followers elect another leader after their timeout. (While it
    # waits, `rt status` gets no answer from it; the metrics endpoint has a thread of
    # its own.)
    log_text = (stream.log_dir / f"sequencer-{old}.log").read_text()
    assert "stepping down as leader" in log_text or "raft waits for room" in log_text
    node = stream.config.node(old)
    url = f"http://{node.host}:{stream.config.ports.sequencer_metrics}/metrics"
    metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    assert "rt_sequencer_unfit_to_lead 1.0" in metrics, metrics
    before = committed_seq(stream, new)
    wait_until(lambda: committed_seq(stream, new) > before + 5, 30, "merging to go on")
    assert stream.leader() != old  # unfit: it stood for no election meanwhile
    # Room again: the old leader is fit, and catches up while publishing goes on.
    ballast.unlink()
    wait_until(
        lambda: _node_field(stream, old, "unfit_to_lead") is None, 30, f"{old} to be fit again"
    )
    target = committed_seq(stream, new)
    wait_until(
        lambda: committed_seq(stream, old) >= target, 60, f"{old} to catch up\n{stream.logs()}"
    )
    for f in feeds:
        f.stop()
    with contextlib.suppress(FileNotFoundError):
        ballast.unlink()
    check_stream(stream, feeds)
