"""Running a daemon: asyncio until SIGTERM or SIGINT, and its Prometheus endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, start_http_server

from rt_appliance.errors import TransportError

__all__ = ["run_daemon", "serve_metrics"]

log = logging.getLogger(__name__)


def run_daemon(name: str, main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main()`` until it returns, or until SIGTERM/SIGINT cancels it (a clean stop)."""

    async def runner() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        log.info("%s starting", name)
        with contextlib.suppress(asyncio.CancelledError):
            await main()
        log.info("%s stopped", name)

    asyncio.run(runner())


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> None:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: not at all)."""
    if port == 0:
        return
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise TransportError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from exc
    log.info("metrics on http://%s:%d/metrics", host, port)
