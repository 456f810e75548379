"""A node whose disk fills keeps only whole records, says why, and catches up once it has room.

Needs root: the node's data directory is a small tmpfs, so the push server meets a
real ENOSPC.
"""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rt_appliance.log.recovery import verify_file
from rt_lab.testing.checkers import log_files, same_log_files
from rt_lab.testing.cluster import wait_until
from tests.replication.conftest import Stream
from tests.replication.test_push import NODES, publish

pytestmark = [pytest.mark.integration, pytest.mark.root]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mount(path: Path, options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def full_node(make_stream: Callable[..., Stream]) -> Iterator[tuple[Stream, Path]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs for a real ENOSPC")
    stream = make_stream(replication={"delete_acked": False})
    data = stream.config.data_dir_of(stream.config.node("rt-1"))
    data.mkdir(parents=True, exist_ok=True)
    mounted = _mount(data, "size=1m")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {mounted.stderr.strip()}")
    try:
        yield stream, data
    finally:
        for daemon in stream.daemons:
            daemon.stop()
        subprocess.run(["umount", "-l", str(data)], check=False)


def test_a_full_disk_keeps_whole_records_and_the_node_catches_up(
    full_node: tuple[Stream, Path],
) -> None:
    stream, data = full_node
    servers = {node: stream.push_server(node) for node in NODES if node != "rt-1"}
    metrics_port = free_port()
    servers["rt-1"] = stream.push_server("rt-1", metrics_port)
    stream.push_client()
    publish(stream.pub_root(), 80)  # about 3 MB: more than rt-1's 1 MB holds
    source = log_files(stream.pub_root() / "trades.pub-1")
    others = [n for n in NODES if n != "rt-1"]
    wait_until(
        lambda: all(same_log_files(source, stream.replica(n)) for n in others),
        60,
        f"the other nodes to hold everything\n{stream.logs()}",
    )
    wait_until(lambda: "disk full" in servers["rt-1"].log(), 30, "rt-1 to report a full disk")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    refused = 'rt_push_server_refused_chunks_total{dir="trades.pub-1",reason="disk_full"}'
    assert refused in metrics
    # What rt-1 kept: a prefix of the source, file by file, of whole valid records.
    kept = log_files(stream.replica("rt-1"))
    assert kept and sum(map(len, kept.values())) < sum(map(len, source.values()))
    for name, content in kept.items():
        assert source[name].startswith(content), name
        assert verify_file(stream.replica("rt-1") / name).valid_bytes == len(content)
    # Room again: rt-1 catches up by itself, byte for byte.
    grown = subprocess.run(
        ["mount", "-o", "remount,size=16m", str(data)], capture_output=True, text=True
    )
    assert grown.returncode == 0, grown.stderr
    wait_until(
        lambda: same_log_files(source, stream.replica("rt-1")),
        60,
        f"rt-1 to catch up\n{stream.logs()}",
    )
