"""The push client inside the application's Publisher (``Publisher(..., replicate=...)``),
against real push servers over mutual TLS: no inotify, one sender per directory, and an
application killed mid-send loses nothing (``rt push-client`` finishes the directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rt_appliance import Position, Publisher, SenderLockedError, Subscriber
from rt_appliance.errors import UsageError
from rt_lab.testing.checkers import log_files, same_log_files
from rt_lab.testing.cluster import wait_until
from tests.replication.conftest import Stream

pytestmark = pytest.mark.integration

NODES = ["rt-1", "rt-2", "rt-3"]
DIR = "trades.pub-1"


def replica_ids(stream: Stream, node: str) -> list[int]:
    return [m.id for m in Subscriber(stream.replica(node)).read(Position.ZERO)]


def thread_policies(pid: int) -> set[int]:
    """The scheduling policy of each thread of process ``pid``."""
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def no_inotify(*_: object, **__: object) -> None:
    raise AssertionError("inotify used by a Publisher that replicates")


def test_publish_to_acknowledged_without_inotify(
    make_stream: Callable[..., Stream], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = make_stream(replication={"delete_acked": False})
    servers = [stream.push_server(node) for node in NODES]
    monkeypatch.setattr("rt_appliance.log.watch.DirectoryWatcher.__init__", no_inotify)
    with Publisher(stream.pub_root(), "trades", "pub-1", replicate=stream.config_path) as pub:
        first = pub.publish(b"one", id=1)
        assert pub.wait_acknowledged(timeout_s=30), stream.logs()
        # every thread of the servers, and the sender's, under SCHED_BATCH; not the
        # application's own (transport/scheduling.py)
        for server in servers:
            assert server.proc is not None
            assert thread_policies(server.proc.pid) == {os.SCHED_BATCH}, server.name
        sender = next(t for t in threading.enumerate() if t.name == "rt-push-trades")
        assert sender.native_id is not None
        assert os.sched_getscheduler(sender.native_id) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
        assert all(p > first for p in pub.acknowledged.values())
        for start in range(2, 5002, 1000):  # batches, then singles: each wakes the sender
            pub.publish_batch(
                [b"m%d" % i for i in range(start, start + 1000)],
                ids=list(range(start, start + 1000)),
            )
        for i in range(5002, 5102):
            pub.publish(b"m%d" % i, id=i)
        end = pub.position
        assert pub.wait_acknowledged(timeout_s=30), stream.logs()
        assert set(pub.acknowledged) == set(NODES)
        assert all(p == end for p in pub.acknowledged.values())
    monkeypatch.undo()  # the checks below read with a Subscriber, which may wait on inotify
    expected = log_files(stream.pub_root() / DIR)
    for node in NODES:
        assert same_log_files(expected, stream.replica(node))
        assert replica_ids(stream, node) == list(range(1, 5102))


def test_a_batch_leaves_for_the_nodes_while_the_publisher_syncs_it(
    make_stream: Callable[..., Stream], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender is woken as soon as a batch is written, not after the application's own
    sync of it: the bytes are on their way while the disk syncs them. Here the sync waits
    until every node holds the batch, and the sender's own look at the files comes only
    after 30 s; a sender woken after the sync would leave the sync waiting."""
    monkeypatch.setattr("rt_appliance.replicate.push_client.PUSH_IDLE_WAIT_S", 30.0)
    stream = make_stream(replication={"delete_acked": False, "ack_timeout_ms": 120_000})
    for node in NODES:
        stream.push_server(node)
    with Publisher(stream.pub_root(), "trades", "pub-1", replicate=stream.config_path) as pub:
        pub.publish_batch([b"warm-up"], ids=[1])
        assert pub.wait_acknowledged(timeout_s=30), stream.logs()
        writer = type(pub._writer)
        real_sync = writer.sync
        held: list[bool] = []

        def sync_once_every_node_holds_it(self: object) -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if all(replica_ids(stream, n) == list(range(1, 12)) for n in NODES):
                    held.append(True)
                    break
                time.sleep(0.01)
            else:
                held.append(False)
            real_sync(self)  # type: ignore[arg-type]

        monkeypatch.setattr(writer, "sync", sync_once_every_node_holds_it)
        pub.publish_batch([b"m%d" % i for i in range(2, 12)], ids=list(range(2, 12)))
        monkeypatch.setattr(writer, "sync", real_sync)
        assert held == [True], stream.logs()
        assert pub.wait_acknowledged(timeout_s=30), stream.logs()


def test_a_second_sender_is_refused_and_takes_over_when_the_first_stops(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(replication={"delete_acked": False})
    for node in NODES:
        stream.push_server(node)
    pub = Publisher(stream.pub_root(), "trades", "pub-1", replicate=stream.config_path)
    pub.publish_batch([b"a%d" % i for i in range(1000)], ids=list(range(1, 1001)))
    assert pub.wait_acknowledged(timeout_s=30), stream.logs()

    # The push-client daemon is a second sender: it says so, sends nothing, waits.
    daemon = stream.push_client()
    wait_until(lambda: "already has a sender" in daemon.log(), 20, "the daemon to see the lock")
    assert f"not sending {DIR}" in daemon.log()
    assert "one sender per directory" in daemon.log()

    pub.close()  # the application stops: the daemon takes the directory over
    wait_until(lambda: f"sending {DIR}: the other sender stopped" in daemon.log(), 20, "take over")
    with Publisher(stream.pub_root(), "trades", "pub-1") as plain:  # a writer that only writes
        plain.publish_batch([b"b%d" % i for i in range(1000)], ids=list(range(1001, 2001)))
    expected = log_files(stream.pub_root() / DIR)
    wait_until(
        lambda: all(same_log_files(expected, stream.replica(n)) for n in NODES),
        30,
        f"the daemon to send the rest\n{stream.logs()}",
    )
    assert replica_ids(stream, "rt-1") == list(range(1, 2001))

    # Now the daemon sends the directory: an application's Publisher is refused, clearly,
    # and leaves the directory free for the next writer.
    with pytest.raises(SenderLockedError, match=r"already has a sender \(pid \d+\)"):
        Publisher(stream.pub_root(), "trades", "pub-1", replicate=stream.config_path)
    with Publisher(stream.pub_root(), "trades", "pub-1") as plain:
        plain.publish(b"c", id=2001)


def test_wrong_host_topic_or_directory_is_a_clear_error(
    make_stream: Callable[..., Stream], tmp_path: Path
) -> None:
    stream = make_stream()
    root, path = stream.pub_root(), stream.config_path
    with pytest.raises(UsageError, match=r"no publisher host 'pub-9' in stream \w+ \(pub-1\)"):
        Publisher(root, "trades", "pub-9", replicate=path)
    with pytest.raises(UsageError, match="topic 'quotes' is not one of publisher host pub-1"):
        Publisher(root, "quotes", "pub-1", replicate=path)
    with pytest.raises(UsageError, match=r"writes where stream .* says host pub-1 publishes"):
        Publisher(tmp_path / "elsewhere", "trades", "pub-1", replicate=path)
    with Publisher(root, "trades", "pub-1") as plain:  # nothing was left locked
        plain.publish(b"x")


_KILLED_APP = """
import os, signal, sys
from rt_appliance import Publisher
pub = Publisher(sys.argv[1], "trades", "pub-1", replicate=sys.argv[2], fsync="never")
for start in range(1, 200001, 1000):
    pub.publish_batch([b"k%d" % i for i in range(start, start + 1000)],
                      ids=list(range(start, start + 1000)))
    if start == 100001:  # killed at once: the page cache keeps what was written
        os.write(1, b"published")
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_application_killed_mid_send_then_push_client_finishes(
    make_stream: Callable[..., Stream],
) -> None:
    stream = make_stream(replication={"delete_acked": False})
    for node in NODES:
        stream.push_server(node)
    app = subprocess.run(
        [sys.executable, "-c", _KILLED_APP, str(stream.pub_root()), str(stream.config_path)],
        capture_output=True,
        timeout=120,
    )
    assert app.returncode == -signal.SIGKILL, app.stderr.decode()[-3000:]
    assert b"published" in app.stdout
    expected = log_files(stream.pub_root() / DIR)
    partial = [len(b"".join(log_files(stream.replica(n)).values())) for n in NODES]
    assert sum(partial) < 3 * sum(map(len, expected.values())), "all sent before the kill"
    stream.push_client()  # resumes from what each node acknowledged
    wait_until(
        lambda: all(same_log_files(expected, stream.replica(n)) for n in NODES),
        60,
        f"push-client to finish the directory\n{stream.logs()}",
    )
    for node in NODES:
        assert replica_ids(stream, node) == list(range(1, 101001))  # none lost, none twice
