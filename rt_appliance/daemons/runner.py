"""Running a daemon: asyncio until SIGTERM or SIGINT, systemd's notify protocol, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import signal
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry

from rt_appliance import trace
from rt_appliance.daemons import metrics_http
from rt_appliance.daemons.memory import return_freed_buffers
from rt_appliance.daemons.notify import Notifier, Served, install_test_hooks, keep_alive
from rt_appliance.errors import TransportError
from rt_appliance.transport import filesync
from rt_appliance.transport.loops import new_loop
from rt_appliance.transport.scheduling import batch_this_thread

__all__ = ["run_daemon", "serve_metrics"]

log = logging.getLogger(__name__)


def run_daemon(
    name: str, main: Callable[[], Awaitable[None]], served: Served | None = None
) -> None:
    """Run ``main()`` until it returns, or until SIGTERM/SIGINT cancels it (a clean stop:
    ``served.leave()`` first, while everything still runs; a second signal cancels at once).
    SIGUSR1 writes every thread's stack to stderr; SIGUSR2 logs every task of the loop
    with where it waits.

    Under systemd, READY=1 goes out once ``served.ready`` is set (at once without
    ``served``), and the watchdog and status task runs on this loop until the end.
    """
    notifier = Notifier()
    # before any thread starts: each inherits it (transport/scheduling.py says why)
    batch_this_thread()
    filesync.mode()  # a wrong RT_FILE_SYNC is refused now, not at the first sync
    # a crash in native code (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) writes every
    # thread's Python stack to stderr before the process dies, so the log says where
    faulthandler.enable(all_threads=True)
    # `kill -USR1 PID` writes every thread's stack to stderr (the journal under systemd):
    # what a daemon that does not stop, or stands still, is waiting on
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    return_freed_buffers()
    trace.start(name.replace(" ", "-"))

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        work = asyncio.ensure_future(main())
        leaving: list[asyncio.Task[None]] = []
        leave = getattr(served, "leave", None)

        def stop() -> None:
            notifier.stopping()
            if leave is None or leaving or work.done():
                work.cancel()
            else:
                leaving.append(asyncio.create_task(_leave_then_cancel(leave, work)))

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        loop.add_signal_handler(signal.SIGUSR2, _log_tasks)
        install_test_hooks(loop)
        log.info("%s starting", name)
        status = served.status_line if served is not None else (lambda: "running")
        pings = asyncio.create_task(keep_alive(notifier, status))
        try:
            if served is not None:
                ready = asyncio.create_task(served.ready.wait())
                await asyncio.wait({work, ready}, return_when=asyncio.FIRST_COMPLETED)
                ready.cancel()
            if not work.done():
                notifier.ready(status())
            with contextlib.suppress(asyncio.CancelledError):
                await work
        finally:
            pings.cancel()
            await asyncio.gather(pings, return_exceptions=True)
        log.info("%s stopped", name)

    with asyncio.Runner(loop_factory=new_loop) as run:
        run.run(runner())


def _log_tasks() -> None:
    """Log every task of the running loop and the line it waits at (SIGUSR2)."""
    tasks = asyncio.all_tasks()
    lines = [f"{len(tasks)} task(s) on the loop:"]
    for task in sorted(tasks, key=lambda t: t.get_name()):
        where = " -> ".join(_awaiting(task.get_coro()))
        state = " cancelling" if task.cancelling() else ""
        lines.append(f"  {task.get_name()}{state}: {where or 'not started'}")
    log.warning("\n".join(lines))


def _awaiting(coro: object) -> list[str]:
    """Where a coroutine waits: its frame, then the frames of what it awaits, innermost
    last (a generator-based await or a future ends the chain)."""
    chain: list[str] = []
    while coro is not None and len(chain) < 30:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        name = frame.f_code.co_filename.rsplit("/", 1)[-1]
        chain.append(f"{frame.f_code.co_name} ({name}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


async def _leave_then_cancel(
    leave: Callable[[], Awaitable[None]], work: asyncio.Future[None]
) -> None:
    try:
        await leave()
    except Exception:  # a clean stop goes on whatever leaving did
        log.exception("before stopping")
    finally:
        work.cancel()


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> None:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: not at all)."""
    if port == 0:
        return
    try:
        metrics_http.start(registry, host, port)
    except OSError as exc:
        raise TransportError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from exc
    log.info("metrics on http://%s:%d/metrics", host, port)
