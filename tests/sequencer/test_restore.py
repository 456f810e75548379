"""Every node lost at once: the stream starts again from one node's data directory.

docs/OPERATIONS.md ("Backups") says what survives the loss of every node: the data
directory of any one node (its merged log, its raft state, its inputs) and the
publishers' own logs. Here rt-2's and rt-3's data directories are gone after a crash of
all three; rt-1's is what is left, and it is restored onto every node, as the procedure
says. (Two nodes started empty would be a majority with nothing: they could elect one
of themselves and the stream would start again from nothing.) The nodes start again,
publishing goes on, and every merged log and subscriber copy ends identical, with every
message once and in order.
"""

from __future__ import annotations

import shutil
import signal

import pytest

from tests.sequencer.conftest import check_stream
from tests.sequencer.test_cluster import two_feeds_merged

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_stream_starts_again_from_one_nodes_data_directory(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream, feeds = two_feeds_merged(local_stream, 3000)

    for node in stream.node_names:  # every node at once
        stream.kill_node(node, signal.SIGKILL)
    kept = stream.data_dir("rt-1")  # the one copy left; the others' disks are gone
    for node in ("rt-2", "rt-3"):
        shutil.rmtree(stream.data_dir(node))
        shutil.copytree(kept, stream.data_dir(node), symlinks=True)  # restored from it
    for node in stream.node_names:
        stream.start_node(node)
    stream.wait_leader(60.0)

    for f in feeds:
        f.publish(3001, 5000)
    check_stream(stream, feeds, timeout_s=120)
