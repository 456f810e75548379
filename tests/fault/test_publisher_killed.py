"""A publisher process killed with SIGKILL mid-stream loses nothing it acknowledged.

The child publishes numbered messages. After every call it prints ``w N`` (N
messages written: the call returned) and, each time a call that makes them
durable returns, ``a N`` (acknowledged: durable). The parent kills it with SIGKILL
at a written count that is not an acknowledgement, starts a new Publisher on the
directory (recovery), appends a new session and reads everything back.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.log.segments import list_files
from tests.helpers import check_whole_log, python, read_all

pytestmark = pytest.mark.fault

ROLL_BYTES = 256 << 10
CHILD = f"""
import sys
from rt_appliance import Publisher
root, fsync, every = sys.argv[1], sys.argv[2], int(sys.argv[3])
pub = Publisher(root, "ticks", "h", fsync=fsync, roll_bytes={ROLL_BYTES})
say = sys.stdout.write  # one write per line (stdout is unbuffered)
n = 0
while True:
    # batches of varying size, some of hundreds of kilobytes
    size = 1 + n % 7 if n % 5 else 300 + n % 700
    pub.publish_batch([b"%08d|" % (n + k) + b"x" * ((n + k) % 900) for k in range(size)])
    n += size
    say(f"w {{n}}\\n")
    if fsync in ("always", "batch"):
        say(f"a {{n}}\\n")  # the call returned: durable
    elif n // every != (n - size) // every:
        pub.flush()
        say(f"a {{n}}\\n")  # flush returned: durable
"""


def run_and_kill(root: Path, fsync: str, every: int, kill_after: int) -> tuple[int, int]:
    """Run the child past ``kill_after`` messages, SIGKILL it; (written, acknowledged)."""
    child = python(CHILD, str(root), fsync, str(every))
    written = acked = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            kind, count = line.split()
            if kind == "a":
                acked = int(count)
                continue
            written = int(count)
            if written >= kill_after and written != acked:
                child.send_signal(signal.SIGKILL)
                break
        rest, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, err
    for line in rest.splitlines(keepends=True):  # printed before the kill landed
        if not line.endswith("\n"):
            continue  # the kill cut this line short
        kind, count = line.split()
        if kind == "a":
            acked = max(acked, int(count))
        written = max(written, int(count))
    return written, acked


@pytest.mark.parametrize(
    "fsync,every,kill_after", [("always", 1, 400), ("never", 50, 2000), ("batch", 1, 700)]
)
def test_publisher_killed_mid_stream(
    tmp_path: Path, fsync: str, every: int, kill_after: int
) -> None:
    written, acked = run_and_kill(tmp_path, fsync, every, kill_after)
    assert written >= kill_after and acked > 0
    directory = tmp_path / "ticks.h"
    assert len(list_files(directory)) > 1  # it rolled on the way
    with Publisher(tmp_path, "ticks", "h", roll_bytes=ROLL_BYTES) as pub:
        assert pub.session == 2
        if pub.recovery is not None:  # a write torn by the kill
            assert pub.recovery.lost_records == 1 and not pub.recovery.removed_file
        pub.publish_batch([b"after the kill %d" % i for i in range(10)])
    messages = read_all(directory)
    old = [m for m in messages if m.position.session == 1]
    numbers = [int(m.payload.split(b"|")[0]) for m in old]
    assert numbers == list(range(len(numbers)))  # in order, no gap, nothing twice
    assert len(numbers) >= acked  # every acknowledged message survived
    assert len(numbers) >= written  # a process crash loses nothing written, not even unsynced
    for m, n in zip(old, numbers, strict=True):
        assert m.payload == b"%08d|" % n + b"x" * (n % 900)
    new = [m.payload for m in messages[len(old) :]]
    assert new == [b"after the kill %d" % i for i in range(10)]
    assert all(m.position.session == 2 for m in messages[len(old) :])
    check_whole_log(directory, [m.payload for m in messages])
