"""A write that fails part way (file size limit, full disk) leaves no partial record.

Without root, ``RLIMIT_FSIZE`` in a child process makes writes past a size fail
with EFBIG after a short write, the same path as a full disk. With root, a small
tmpfs gives a real ENOSPC.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rt_appliance import LogFullError, Publisher
from rt_appliance.errors import LogLockedError
from rt_appliance.log.segments import DirectoryLock, list_files
from tests.helpers import check_whole_log, python, read_all, snapshot

pytestmark = pytest.mark.fault

CHILD = """
import json, resource, signal, sys
from pathlib import Path
from rt_appliance import LogError, LogFullError, Publisher

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
root, limit, case = sys.argv[1], int(sys.argv[2]), sys.argv[3]
directory = Path(root) / "t.h"
out = {"sent": [], "errors": []}

def sizes():
    return {p.name: p.stat().st_size for p in sorted(directory.glob("log.*"))}

pub = Publisher(root, "t", "h", roll_bytes=4096, fsync="always")
pub.publish(b"a" * 900)
out["sent"].append("a" * 900)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
before = sizes()
try:
    if case == "single":
        pub.publish(b"b" * 2500)  # crosses the limit: written in part, then EFBIG
    elif case == "batch":
        pub.publish_batch([b"c" * 800] * 3)
    else:  # a batch that rolls: its first record fits in file 0, the rest overflow file 1
        pub.publish_batch([b"d" * 1472, b"e" * 1672, b"f" * 1472])
except LogError as exc:
    out["errors"].append([type(exc).__name__, str(exc)])
out["before"], out["after"] = before, sizes()
pub.publish(b"small after the error")
out["sent"].append("small after the error")
pub.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("case", ["single", "batch", "rolling-batch"])
def test_write_past_the_file_size_limit(tmp_path: Path, case: str) -> None:
    child = python(CHILD, str(tmp_path), "3000", case)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    out = json.loads(stdout)
    assert len(out["errors"]) == 1
    name, message = out["errors"][0]
    assert name == "LogError" and "File too large" in message and "nothing" in message
    after, before = out["after"], out["before"]
    for file, size in before.items():
        assert after[file] == size  # every file the call touched is back to its size
    rolled_to = set(after) - set(before)
    assert len(rolled_to) == (1 if case == "rolling-batch" else 0)
    for file in rolled_to:  # the file the failed call rolled to is kept, with its header only
        assert after[file] < 100
    check_whole_log(tmp_path / "t.h", [s.encode() for s in out["sent"]])


@pytest.fixture
def small_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs for a real ENOSPC")
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.root
def test_disk_full(small_tmpfs: Path) -> None:
    sent: list[bytes] = []
    with Publisher(small_tmpfs, "t", "h", roll_bytes=64 * 1024, fsync="never") as pub:
        with pytest.raises(LogFullError) as err:
            for i in range(10_000):
                body = b"%05d" % i + b"z" * (i * 37 % 3000)
                if i % 4 == 3:
                    batch = [body, body + b"+"]
                    pub.publish_batch(batch)
                    sent.extend(batch)
                else:
                    pub.publish(body)
                    sent.append(body)
        assert err.value.retryable and "disk full" in str(err.value)
        before = snapshot(pub.directory)
        with pytest.raises(LogFullError):
            pub.publish(b"y" * 5000)
        assert snapshot(pub.directory) == before  # the failed call left nothing
        first = list_files(pub.directory)[0]
        kept_from = sum(1 for m in read_all(pub.directory) if m.position.file_key == first.key)
        first.path.unlink()  # space freed: publishing goes on
        pub.publish(b"after space was freed")
        sent = [*sent[kept_from:], b"after space was freed"]
    check_whole_log(small_tmpfs / "t.h", sent)


@pytest.mark.root
def test_a_directory_lock_is_taken_on_a_full_disk(small_tmpfs: Path) -> None:
    """Every daemon locks its directories at start; the pid it notes in the lock file
    needs a block. On a full disk that note used to fail and the daemon exited (status
    1, found by rt chaos): now the lock holds without it."""
    directory = small_tmpfs / "merged"
    directory.mkdir()
    DirectoryLock(directory).release()  # an empty lock file, as a clean stop leaves it
    fd = os.open(small_tmpfs / "ballast", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left"):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    held = DirectoryLock(directory)
    try:
        with pytest.raises(LogLockedError, match="already has a writer"):
            DirectoryLock(directory)
    finally:
        held.release()
