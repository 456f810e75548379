"""The metrics endpoint: prometheus-client's exposition behind a server bad clients cannot hold.

prometheus-client's own ``start_http_server`` gives every connection a thread with no
deadline and prints a traceback for each malformed request: a client that opens
connections and sends nothing (or a byte now and then) would hold threads and
descriptors for ever. This server serves the same ``/metrics`` text, but:

* a request must arrive whole within ``METRICS_REQUEST_TIMEOUT_S`` of the connection, or
  the connection is shut (a slow-loris client cannot stretch it byte by byte);
* at most ``METRICS_MAX_CONNECTIONS`` are served at once; more are closed at accept;
* it starts without looking its own address up in DNS (http.server's ``getfqdn``,
  which held each start until the lookup failed where DNS was out of reach; the delay
  seen is in docs/BENCHMARKS.md);
* every refusal (malformed request, over-long line, too many headers, timeout, too
  many connections) is counted in ``rt_metrics_http_rejected_total{reason}`` and
  logged, at most once per reason every ``METRICS_LOG_EVERY_S`` seconds.

The limits are in :mod:`rt_appliance.limits`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from socketserver import TCPServer, ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

from rt_appliance.limits import (
    METRICS_LISTEN_BACKLOG,
    METRICS_LOG_EVERY_S,
    METRICS_MAX_CONNECTIONS,
    METRICS_REQUEST_TIMEOUT_S,
)

__all__ = ["MetricsServer", "start"]

log = logging.getLogger(__name__)


class _Handler(WSGIRequestHandler):
    server: MetricsServer
    timeout = METRICS_REQUEST_TIMEOUT_S  # also bounds each read and write of the socket

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(METRICS_REQUEST_TIMEOUT_S, self._too_slow)
        self._deadline.daemon = True
        self._deadline.start()
        self._timed_out = False

    def _too_slow(self) -> None:
        self._timed_out = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)  # wakes the blocked read

    def handle(self) -> None:
        try:
            super().handle()
        except OSError as exc:  # reset by the client, or the deadline shut the socket
            slow = self._timed_out or isinstance(exc, TimeoutError)
            self.server.refused("timeout" if slow else "broken", str(exc) or type(exc).__name__)
            return
        if self._timed_out:  # what came in before the cut may have been answered, to no one
            self.server.refused(
                "timeout", f"no whole request within {METRICS_REQUEST_TIMEOUT_S:g}s"
            )

    def parse_request(self) -> bool:
        parsed = bool(super().parse_request())
        if parsed:
            self._deadline.cancel()  # the request is in; answering has no deadline
        return parsed

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_error(self, format: str, *args: Any) -> None:
        """Called by the base for a request it answers with an error (400, 414, 431)."""
        self.server.refused("bad-request", format % args)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, a bounded number of them; refusals counted and logged."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = METRICS_LISTEN_BACKLOG

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self.rejected = Counter(
            "rt_metrics_http_rejected",
            "Connections to the metrics endpoint refused, by reason",
            ["reason"],
            registry=registry,
        )
        self._slots = threading.BoundedSemaphore(METRICS_MAX_CONNECTIONS)
        self._logged: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}
        self._lock = threading.Lock()
        super().__init__((host, port), _Handler)
        self.set_app(make_wsgi_app(registry))

    def server_bind(self) -> None:
        """Bind, without http.server's reverse lookup of our own address (``getfqdn``):
        where DNS cannot be reached that lookup held every daemon's start until it failed."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]
        self.setup_environ()

    def refused(self, reason: str, detail: str) -> None:
        self.rejected.labels(reason).inc()
        now = time.monotonic()
        with self._lock:
            if now - self._logged.get(reason, -METRICS_LOG_EVERY_S) < METRICS_LOG_EVERY_S:
                self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
                return
            self._logged[reason] = now
            more = self._unlogged.pop(reason, 0)
        log.warning(
            "metrics endpoint refused a connection (%s): %s%s",
            reason,
            detail,
            f" (and {more} more since the last such message)" if more else "",
        )

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused("too-many-connections", f"{METRICS_MAX_CONNECTIONS} already open")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An error escaping a handler: counted and logged, no traceback on stderr."""
        self.refused("error", f"from {client_address[0]}")


def start(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread."""
    server = MetricsServer(host, port, registry)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
