"""No ``asyncio.wait_for`` in the product: on Python 3.11 it swallows a cancellation that
arrives while the awaited thing completes (its result is returned and the task runs on
as if never cancelled). A node stopping right after handing its leadership over hung
so: its reporter's dial to the new leader got its WELCOME as the stop cancelled it, and
the stop waited for the reporter for good. ``async with asyncio.timeout(...)`` keeps the
cancellation; both behaviours are checked here, then the source."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

import rt_appliance

pytestmark = pytest.mark.unit

PRODUCT = Path(rt_appliance.__file__).parent


async def _cancelled_as_it_completes(use_timeout: bool) -> bool:
    """Whether a task cancelled in the turn its awaited future completes goes on."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    went_on = []

    async def waiter() -> None:
        if use_timeout:
            async with asyncio.timeout(5):
                await future
        else:
            await asyncio.wait_for(future, 5)
        went_on.append(True)

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0.001)
    future.set_result(1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return bool(went_on)


def test_asyncio_timeout_keeps_a_cancellation_that_arrives_with_the_result() -> None:
    assert asyncio.run(_cancelled_as_it_completes(use_timeout=True)) is False


def test_the_product_never_calls_asyncio_wait_for() -> None:
    found = []
    for path in sorted(PRODUCT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                found.append(f"{path.relative_to(PRODUCT.parent)}:{node.lineno}")
    assert not found, "use `async with asyncio.timeout(...)` instead: " + ", ".join(found)
