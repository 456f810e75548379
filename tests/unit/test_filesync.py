"""Syncs the kernel takes (io_submit) and settles on the loop, and those it does not,
which run on the offload pool: each ends with the descriptor closed and the sync's own
result, never before the sync has ended."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from rt_appliance.errors import UsageError
from rt_appliance.transport import filesync
from rt_appliance.transport.loops import new_loop

needs_aio = pytest.mark.skipif(
    filesync._LIBC is None,
    reason="this system has no native asynchronous I/O to sync through (Linux on x86-64 or arm64)",
)


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    loop = new_loop()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def written(path: Path, data: bytes) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    os.write(fd, data)
    return fd


@needs_aio
def test_the_kernel_takes_the_sync_and_no_thread_is_involved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_thread(*_: object) -> None:
        raise AssertionError("a sync went to a worker thread")

    monkeypatch.setattr(filesync, "in_thread", no_thread)
    fds = [written(tmp_path / f"f{n}", b"x" * 100) for n in range(3)]

    async def scenario() -> tuple[bool, list[None]]:
        kernel = filesync.kernel_syncs()
        done = await asyncio.gather(
            filesync.sync_and_close(fds[0]),
            filesync.sync_and_close(fds[1], data_only=True),
            filesync.sync_and_close(fds[2]),
        )
        return kernel, done

    kernel, done = run(scenario)
    assert kernel and done == [None, None, None]
    assert not any(is_open(fd) for fd in fds)


@needs_aio
def test_more_syncs_at_once_than_a_context_holds_all_end(tmp_path: Path) -> None:
    count = filesync._EVENTS + 40  # the rest go to the offload pool
    fds = [written(tmp_path / f"f{n % 8}", b"y") for n in range(count)]

    async def scenario() -> list[None]:
        return await asyncio.gather(*(filesync.sync_and_close(fd) for fd in fds))

    assert run(scenario) == [None] * count
    assert not any(is_open(fd) for fd in fds)


def test_a_descriptor_the_kernel_cannot_sync_fails_as_fsync_does() -> None:
    """A pipe has no fsync: io_submit refuses it, the worker thread's fsync then fails
    with EINVAL, and the caller sees that error; the descriptor is closed all the same."""
    read_end, write_end = os.pipe()

    async def scenario() -> None:
        await filesync.sync_and_close(read_end)

    with pytest.raises(OSError) as raised:
        run(scenario)
    assert raised.value.errno == errno.EINVAL
    assert not is_open(read_end)
    os.close(write_end)


def test_a_failure_the_kernel_reports_reaches_the_caller() -> None:
    """What an AIO sync ends with (minus an errno) settles the caller's future so."""

    async def scenario() -> tuple[OSError, None]:
        loop = asyncio.get_running_loop()
        failed, fine, cancelled = loop.create_future(), loop.create_future(), loop.create_future()
        filesync.settle(failed, -errno.EIO)
        filesync.settle(fine, 0)
        cancelled.cancel()
        filesync.settle(cancelled, -errno.EIO)  # nobody waits: nothing to raise into
        with pytest.raises(OSError) as raised:
            await failed
        return raised.value, await fine

    error, result = run(scenario)
    assert error.errno == errno.EIO and "Input/output error" in str(error)
    assert result is None


def test_threads_mode_runs_each_sync_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(filesync.ENV, "threads")
    ran_on: list[str] = []

    def on_thread(fd: int) -> None:
        ran_on.append(threading.current_thread().name)
        os.fsync(fd)
        os.close(fd)

    fd = written(tmp_path / "f", b"z" * 10)

    async def scenario() -> bool:
        await filesync.sync_and_close(fd, on_thread=on_thread)
        return filesync.kernel_syncs()

    assert run(scenario) is False
    assert len(ran_on) == 1 and ran_on[0].startswith("rt-offload-")
    assert not is_open(fd)


def test_a_wrong_mode_is_refused_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(filesync.ENV, "sometimes")
    fd = os.open(os.devnull, os.O_RDONLY)

    async def scenario() -> None:
        await filesync.sync_and_close(fd)

    with pytest.raises(UsageError, match=r"RT_FILE_SYNC='sometimes': expected kernel"):
        run(scenario)
    os.close(fd)  # refused before anything took it


@needs_aio
@pytest.mark.skipif(
    sys.platform != "linux", reason="counts open descriptors in /proc/self/fd, which only Linux has"
)
def test_a_collected_loop_gives_its_context_and_eventfd_back(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def scenario() -> None:
        await filesync.sync_and_close(written(tmp_path / "f", b"w"))

    gc.collect()
    before, rings = open_fds(), len(filesync._rings)
    for _ in range(5):
        run(scenario)
    gc.collect()
    assert open_fds() == before  # no eventfd left behind by the five loops
    assert len(filesync._rings) == rings
