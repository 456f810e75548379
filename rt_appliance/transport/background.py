"""An event loop on a thread of an application, for the in-process clients.

A Publisher that replicates and a Subscriber that pulls run the daemons' own
asyncio clients (push, pull) on a thread of the application, with a loop of their
own: the application's threads never wait on the network, and the client owns its
state on that loop as it does in the daemon.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from rt_appliance.transport.loops import new_loop
from rt_appliance.transport.scheduling import batch_this_thread

__all__ = ["LoopThread"]

log = logging.getLogger(__name__)


class LoopThread:
    """Runs ``main(stop)`` on a new event loop in a daemon thread until :meth:`stop`.

    ``failure`` is what ended ``main`` early (None while it runs or after a clean stop).
    """

    def __init__(
        self, name: str, main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]
    ) -> None:
        self.loop = new_loop()
        self.failure: BaseException | None = None
        self._main = main
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        batch_this_thread()  # this thread only: the application's keep their policy
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._body())
        except BaseException as exc:  # the application learns of it through ``failure``
            self.failure = exc
            log.error("%s stopped: %s", self._thread.name, exc, exc_info=exc)
        finally:
            self._started.set()
            self.loop.close()

    async def _body(self) -> None:
        self._stop = asyncio.Event()
        self._started.set()
        await self._main(self._stop)

    def stop(self) -> None:
        """Ask ``main`` to end and wait for the thread. Idempotent."""
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
