"""The pull client inside the application's Subscriber (``Subscriber(pull=..., host=...)``)
on a real 3-node stream: woken by arrivals (no inotify), fail-over to another node mid-stream
at the same position, one pull client per copy, and an application killed mid-stream whose
copy ``rt pull-client`` then finishes."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from rt_appliance import LogLockedError, Subscriber
from rt_appliance.errors import UsageError
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import Feed, Follower, check_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def no_inotify(*_: object, **__: object) -> None:
    raise AssertionError("inotify used by a Subscriber that pulls")


class Reader(Follower):
    """Follows a Subscriber from a thread, collecting message ids."""

    def __init__(self, sub: Subscriber) -> None:
        self.ids: list[int] = []
        super().__init__(sub, lambda batch: self.ids.extend(m.id for m in batch))

    def wait_for(self, count: int, what: str, logs: Any) -> None:
        wait_until(lambda: len(self.ids) >= count or self.error is not None, 60, what)
        assert self.error is None, f"{self.error!r}\n{logs()}"


def test_subscriber_pulls_in_process_and_fails_over(local_stream, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3).start(pull_clients=False)
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.publish(1, 3000)
    monkeypatch.setattr("rt_appliance.subscribe.subscriber.DirectoryWatcher", no_inotify)
    with Subscriber(pull=stream.config_path, host="sub-1") as sub:
        assert sub.directory == stream.subscriber_dir("sub-1")
        reader = Reader(sub)
        reader.wait_for(3000, "the first 3000 messages", stream.logs)
        with pytest.raises(LogLockedError, match="already has a writer"):
            Subscriber(pull=stream.config_path, host="sub-1")  # one pull client per copy

        source = sub._puller.client._pulling_from  # type: ignore[union-attr]
        assert source in stream.node_names
        stream.kill_node(source)  # kill -9 the node it pulls from, mid-stream
        feed.publish(3001, 6000)
        reader.wait_for(6000, "the rest, from another node", stream.logs)
        assert sub._puller.client._pulling_from not in (None, source)  # type: ignore[union-attr]
        assert reader.ids == list(range(1, 6001))  # no gap, no repeat across the fail-over
    monkeypatch.undo()
    stream.start_node(source)
    check_stream(stream, [feed])  # the copy is byte-identical to every node's merged log


def test_a_pulling_subscriber_needs_a_subscriber_host(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=1)
    with pytest.raises(UsageError, match="sub-9"):
        Subscriber(pull=stream.config_path, host="sub-9")
    with pytest.raises(UsageError, match=r"copy stream .* keeps for host sub-1"):
        Subscriber(stream.work / "elsewhere", pull=stream.config_path, host="sub-1")
    with pytest.raises(UsageError, match="needs a directory"):
        Subscriber()


_KILLED_APP = """
import os, signal, sys
from rt_appliance import Subscriber
sub = Subscriber(pull=sys.argv[1], host="sub-1")
seen = 0
for batch in sub.read_batches(0, follow=True):
    seen += len(batch)
    if seen >= 2000:
        os.write(1, b"read")
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_application_killed_mid_stream_then_pull_client_finishes(local_stream) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3).start(pull_clients=False)
    stream.wait_leader()
    feed = Feed(stream, "pub-1", "trades")
    feed.publish(1, 20000)
    app = subprocess.run(
        [sys.executable, "-c", _KILLED_APP, str(stream.config_path)],
        capture_output=True,
        timeout=120,
    )
    assert app.returncode == -signal.SIGKILL, app.stderr.decode()[-3000:]
    assert app.stdout == b"read"
    stream.subscriber_daemon("sub-1").start()  # resumes where the killed copy ends
    feed.publish(20001, 21000)
    check_stream(stream, [feed])
