"""Running an asyncio daemon until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["run_daemon"]

log = logging.getLogger(__name__)


def run_daemon(name: str, main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    """Run ``main(stop)``; SIGTERM or SIGINT sets ``stop`` and ``main`` returns cleanly."""

    async def wrapper() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("%s starting", name)
        await main(stop)
        log.info("%s stopped", name)

    asyncio.run(wrapper())
