"""A daemon's stop cancels its tasks again when a cancellation was lost, and never waits
for good on a task that runs on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from rt_appliance.daemons.tasks import cancel_and_wait

pytestmark = pytest.mark.unit


async def _loses_one_cancellation(ended: list[str]) -> None:
    """As a task does whose cancellation an expiring asyncio.timeout swallowed."""
    with contextlib.suppress(asyncio.CancelledError):  # lost: it runs on
        await asyncio.Event().wait()
    try:
        await asyncio.Event().wait()
    finally:
        ended.append("second cancellation")


def test_a_task_that_lost_its_cancellation_is_cancelled_again() -> None:
    async def main() -> float:
        ended: list[str] = []
        task = asyncio.create_task(_loses_one_cancellation(ended), name="reporter")
        await asyncio.sleep(0)
        start = time.monotonic()
        await cancel_and_wait([task], grace_s=5.0)
        assert task.done() and ended == ["second cancellation"]
        return time.monotonic() - start

    assert asyncio.run(main()) < 2.0


def test_a_task_that_never_ends_is_named_and_left(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(10)

        task = asyncio.create_task(stubborn(), name="stubborn")
        quick = asyncio.create_task(asyncio.sleep(10), name="quick")
        await asyncio.sleep(0)
        with caplog.at_level(logging.WARNING):
            await cancel_and_wait([task, quick], grace_s=0.5)
        assert quick.cancelled() and not task.done()
        release.set()  # let it end, for a clean loop
        task.cancel()
        await task

    asyncio.run(main())
    assert "stubborn still running 0.5 s after cancelled" in caplog.text
    assert "quick" not in caplog.text
