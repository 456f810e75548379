"""A second writer on a directory that already has one is refused, and changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rt_appliance import LogLockedError, Publisher
from tests.helpers import check_whole_log, python, snapshot

pytestmark = pytest.mark.fault

HOLDER = """
import sys
from rt_appliance import Publisher
pub = Publisher(sys.argv[1], "t", "h", fsync="always")
pub.publish(b"from child")
print("ready", flush=True)
sys.stdin.readline()  # hold the directory until told to go
pub.publish(b"child again")
pub.close()
print("done", flush=True)
"""


def test_second_writer_from_another_process_is_refused(tmp_path: Path) -> None:
    child = python(HOLDER, str(tmp_path))
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        before = snapshot(tmp_path / "t.h")
        with pytest.raises(LogLockedError) as err:
            Publisher(tmp_path, "t", "h")
        assert f"pid {child.pid}" in str(err.value)
        assert snapshot(tmp_path / "t.h") == before  # no recovery, no session taken
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with Publisher(tmp_path, "t", "h") as pub:  # free once the holder is gone
        assert pub.session == 2
        pub.publish(b"parent")
    check_whole_log(tmp_path / "t.h", [b"from child", b"child again", b"parent"])


def test_lock_of_a_killed_writer_is_released(tmp_path: Path) -> None:
    child = python(HOLDER, str(tmp_path))
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    with Publisher(tmp_path, "t", "h") as pub:
        assert pub.recovery is None
        pub.publish(b"parent")
    check_whole_log(tmp_path / "t.h", [b"from child", b"parent"])
    assert sys.executable  # the child ran with this interpreter
