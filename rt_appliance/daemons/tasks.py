"""Cancelling a daemon's tasks when it stops, without hanging on one that runs on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from rt_appliance.limits import CANCEL_AGAIN_S, CANCEL_GRACE_S

__all__ = ["cancel_and_wait"]

log = logging.getLogger(__name__)


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[object]], grace_s: float = CANCEL_GRACE_S
) -> None:
    """Cancel ``tasks`` and wait until each has ended, for ``grace_s`` at most.

    A task still running ``CANCEL_AGAIN_S`` after its cancellation is cancelled again:
    on Python 3.11 a cancellation can be lost when an ``asyncio.timeout`` in the task
    expires in the same turn of the loop, and the task then runs on as if it had never
    been cancelled (a node's stop waited for its reporter for good). Only for tasks
    whose own cleanup is short: a second cancellation interrupts it. Tasks still
    running after ``grace_s`` are named in a warning and left behind."""
    pending = {t for t in tasks if not t.done()}
    deadline = time.monotonic() + grace_s
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - time.monotonic()
        if left <= 0:
            names = ", ".join(sorted(t.get_name() for t in pending))
            log.warning("stopping: %s still running %.1f s after cancelled", names, grace_s)
            return
        done, pending = await asyncio.wait(pending, timeout=min(CANCEL_AGAIN_S, left))
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: an error while stopping is not news
