"""Blocking system calls (syncs) run off the event loop, on a few threads, cheaply.

``asyncio.to_thread`` hands a call over through a ``concurrent.futures`` executor: a
context copy, checks that the callable is no coroutine function, a future with a lock
of its own, a semaphore, and a chain of callbacks back to the loop. A node made two
such hand-offs per message (its copy of the input, its raft journal, which now goes to
the kernel where it can: :mod:`.filesync`), and that machinery was 5-6% of a follower's
loop in py-spy at 50 msg/s. Here a call goes through one
queue to a small pool of threads, and its result comes back with one
``call_soon_threadsafe``.

The pool serves every event loop of the process. A call runs to its end even if the
task awaiting it is cancelled (as with ``to_thread``): a sync is never cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["THREADS", "in_thread"]

T = TypeVar("T")

THREADS = 4  # syncs of different files at once (an input's and the raft journal's)

_Work = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
_threads: list[threading.Thread] = []
_start_lock = threading.Lock()


def in_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``fn(*args)`` on one of the pool's threads; a future of the running loop settles
    with its result or exception. Call it on the loop's thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    if len(_threads) < THREADS:
        _start()
    _queue.put((loop, future, fn, args))
    return future


def _start() -> None:
    with _start_lock:
        while len(_threads) < THREADS:
            thread = threading.Thread(target=_work, name=f"rt-offload-{len(_threads)}", daemon=True)
            thread.start()
            _threads.append(thread)


def _work() -> None:
    while True:
        loop, future, fn, args = _queue.get()
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed to the awaiting task, as to_thread does
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, result, error)
        del loop, future, fn, args, result, error


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
