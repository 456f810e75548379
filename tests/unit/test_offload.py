"""Blocking calls handed to the offload pool run on its threads and come back to the
loop that asked: results, exceptions, many at once, and a loop that closed meanwhile."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rt_appliance.transport import offload
from rt_appliance.transport.offload import in_thread

pytestmark = pytest.mark.unit


def test_a_call_runs_on_a_pool_thread_and_its_result_comes_back() -> None:
    async def scenario() -> tuple[str, str]:
        return await in_thread(lambda: threading.current_thread().name), (
            threading.current_thread().name
        )

    ran_on, loop_on = asyncio.run(scenario())
    assert ran_on.startswith("rt-offload-") and ran_on != loop_on


def test_an_exception_reaches_the_awaiting_task() -> None:
    def failing() -> None:
        raise OSError(5, "Input/output error")

    async def scenario() -> None:
        await in_thread(failing)

    with pytest.raises(OSError, match="Input/output error"):
        asyncio.run(scenario())


def test_calls_run_at_once_up_to_the_pool_size() -> None:
    started = threading.Barrier(offload.THREADS, timeout=5)

    def meet(n: int) -> int:
        started.wait()  # every call waits for the others: they must run together
        return n * n

    async def scenario() -> list[int]:
        return list(await asyncio.gather(*(in_thread(meet, n) for n in range(offload.THREADS))))

    assert asyncio.run(scenario()) == [n * n for n in range(offload.THREADS)]


def test_a_loop_that_closed_meanwhile_does_not_stop_the_pool() -> None:
    release, finished = threading.Event(), threading.Event()

    def wait_for_release() -> None:
        release.wait(5)
        finished.set()

    async def abandon() -> None:
        in_thread(wait_for_release)  # nobody awaits it; the loop closes before it ends

    asyncio.run(abandon())
    release.set()
    assert finished.wait(5)  # the abandoned call ended on its thread, its loop gone

    async def later() -> int:
        return await in_thread(sum, [1, 2, 3])

    assert asyncio.run(later()) == 6
    assert all(t.is_alive() for t in offload._threads)  # every thread still serves


def test_a_cancelled_wait_leaves_the_call_to_finish() -> None:
    done = threading.Event()

    def slow() -> None:
        time.sleep(0.1)
        done.set()

    async def scenario() -> None:
        future = in_thread(slow)
        future.cancel()
        with pytest.raises(asyncio.CancelledError):
            await future

    asyncio.run(scenario())
    assert done.wait(5)  # the call ran to its end all the same
