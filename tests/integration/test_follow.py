"""Following a log: a reader with follow=True sees messages published after it started."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from rt_appliance import Publisher, Subscriber
from rt_appliance.log.segments import list_files
from rt_appliance.log.watch import AsyncDirectoryWatcher
from tests.helpers import Follower, check_whole_log, payloads, read_all

pytestmark = pytest.mark.integration


def publish_stop(root: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    def stop(payload: bytes) -> None:
        with Publisher(root, "t", "h", **kwargs) as pub:  # type: ignore[arg-type]
            pub.publish(payload)

    return stop


def test_follower_started_before_the_publisher_sees_its_messages(tmp_path: Path) -> None:
    follower = Follower(tmp_path / "t.h")  # the directory does not exist yet
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish(b"first", id=1)
        got = follower.take(1)
        assert [(m.payload, m.id) for m in got] == [(b"first", 1)]
        pub.publish_batch([b"second", b"third"])
        assert payloads(follower.take(2)) == [b"second", b"third"]
    follower.stop(publish_stop(tmp_path))


def test_follower_crosses_rolls(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
        pub.publish(b"before the reader")
        follower = Follower(pub.directory)
        assert payloads(follower.take(1)) == [b"before the reader"]
        sent = []
        for i in range(40):  # each one waited for: the reader is at the tail at every roll
            sent.append(b"live %02d " % i + b"." * 100)
            pub.publish(sent[-1])
            assert payloads(follower.take(1)) == [sent[-1]]
        assert len(list_files(pub.directory)) >= 5
        burst = [b"burst %d" % i * 30 for i in range(50)]  # and a burst rolling several times
        for body in burst:
            pub.publish(body)
        assert payloads(follower.take(50)) == burst
        assert follower.nothing_more()
    follower.stop(publish_stop(tmp_path, roll_bytes=1024))


def test_follower_crosses_sessions(tmp_path: Path) -> None:
    follower = Follower(tmp_path / "t.h")
    for session in (1, 2, 3):
        with Publisher(tmp_path, "t", "h", roll_bytes=1024) as pub:
            assert pub.session == session
            pub.publish(b"session %d" % session)
            got = follower.take(1)
            assert payloads(got) == [b"session %d" % session]
            assert got[0].position.session == session
    follower.stop(publish_stop(tmp_path))


def test_follower_from_the_end_position_gets_only_new_messages(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish_batch([b"old 1", b"old 2"])
        end = Subscriber(pub.directory).end_position()
        follower = Follower(pub.directory, end)
        pub.publish(b"new")
        got = follower.take(1)
        assert payloads(got) == [b"new"]
        assert got[0].position == end
    follower.stop(publish_stop(tmp_path))


def test_follower_with_topic_filter(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish(b"a")
        other = Follower(pub.directory, topics=["other"])
        mine = Follower(pub.directory, topics=["t"])
        pub.publish(b"b")
        assert payloads(mine.take(2)) == [b"a", b"b"]
        assert other.nothing_more()
    mine.stop(publish_stop(tmp_path))


def test_follower_waits_at_a_torn_tail_until_recovery(tmp_path: Path) -> None:
    with Publisher(tmp_path, "t", "h") as pub:
        pub.publish(b"kept")
        follower = Follower(pub.directory)
        assert payloads(follower.take(1)) == [b"kept"]
        last = pub._writer.current.path
    with open(last, "ab") as f:  # half a record, as a crash mid-write leaves it
        f.write(os.urandom(10))
    with Publisher(tmp_path, "t", "h") as pub:
        assert pub.recovery is not None and pub.recovery.lost_bytes == 10
        pub.publish(b"after recovery")
        assert payloads(follower.take(1)) == [b"after recovery"]
    follower.stop(publish_stop(tmp_path))
    check_whole_log(pub.directory, [b"kept", b"after recovery", b"__stop_following__"])
    assert payloads(read_all(pub.directory))[-1] == b"__stop_following__"


def test_async_watcher_wakes_on_a_write_and_keeps_a_change_made_before_the_wait(
    tmp_path: Path,
) -> None:
    """The event-loop watcher: a write wakes a waiting task; a write between a read and
    the next wait is not lost; no change means a timeout that says so."""

    async def scenario() -> tuple[bool, bool, bool, float]:
        with AsyncDirectoryWatcher(tmp_path) as watcher:
            idle = await watcher.wait(0.05)
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, (tmp_path / "a").write_bytes, b"x")
            started = time.monotonic()
            woken = await watcher.wait(5.0)
            waited = time.monotonic() - started
            (tmp_path / "a").write_bytes(b"y")  # a change while nobody waits
            await asyncio.sleep(0.05)  # the loop takes the event meanwhile
            kept = await watcher.wait(0.0)
        return idle, woken, kept, waited

    idle, woken, kept, waited = asyncio.run(scenario())
    assert not idle
    assert woken and waited < 4.0
    assert kept
