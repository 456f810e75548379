"""Trace points on the data path, for ``rt bench cluster --measure trace``.

Off unless the environment names a directory in ``RT_TRACE_DIR``: then every daemon
appends one line per event to ``<dir>/<process>-<pid>.trace``::

    <time_ns> <point> <key> <value> [<value>...]

An event says how far a byte stream has come at one point of the path (a position in
an input, a raft index, a merged position), never which message: the bench maps its
messages onto these marks afterwards (:mod:`rt_lab.bench.tracemap`). Events
are per batch, so a trace costs a few lines per wake-up, written through a buffer that
is flushed at most every ``limits.TRACE_FLUSH_S`` and when the process exits.

The points, in the order a message passes them:

=========== ============================= ==========================================
point       key                           values
=========== ============================= ==========================================
send        ``<node>/<input>``            position sent through (push client)
in          ``<node>/<input>``            position written to ``in/`` (push server)
synced      ``<node>/<input>``            position synced and acknowledged
reported    ``<node>/<input>``            extent reported by a follower (leader side)
planned     ``<input>``                   end of a range planned (leader)
proposed    ``<input>``                   end of a range handed to raft (leader)
jsynced     ``<node>``                    raft index the journal is synced through
entries     ``<node>``                    last raft index of an append received (follower)
answer      ``<node>``                    raft index the follower ``<node>`` acknowledged,
                                          as its answer reached the leader
commit      ``<node>``                    raft commit index, as this node knows it
applied     ``<node>``                    raft index, input, range end, merged seq
merged      ``<node>``                    merged seq, merged position after it
pulled      ``<node>/<host>``             merged position sent (pull server)
copy        ``<host>``                    merged position in the subscriber's copy
delivered   ``<host>/<topic>``            newest publish timestamp read (the application)
=========== ============================= ==========================================
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from pathlib import Path
from typing import TextIO

from rt_appliance.limits import TRACE_BUFFER_BYTES, TRACE_FLUSH_S

__all__ = ["ENV", "enabled", "event", "start"]

ENV = "RT_TRACE_DIR"


class _Tracer:
    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", buffering=TRACE_BUFFER_BYTES)
        self._lock = threading.Lock()  # daemons trace from worker threads too
        self._next_flush = time.monotonic() + TRACE_FLUSH_S
        atexit.register(self.close)

    def event(self, point: str, key: str, values: tuple[object, ...]) -> None:
        line = f"{time.time_ns()} {point} {key} {' '.join(map(str, values))}\n"
        with self._lock:
            if self._file.closed:
                return
            self._file.write(line)
            if time.monotonic() >= self._next_flush:
                self._file.flush()
                self._next_flush = time.monotonic() + TRACE_FLUSH_S

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


_TRACER: _Tracer | None = None


def start(process: str) -> bool:
    """Trace this process if ``RT_TRACE_DIR`` is set; True if it is."""
    global _TRACER
    directory = os.environ.get(ENV)
    if not directory or _TRACER is not None:
        return _TRACER is not None
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    _TRACER = _Tracer(path / f"{process}-{os.getpid()}.trace")
    return True


def enabled() -> bool:
    return _TRACER is not None


def event(point: str, key: str, *values: object) -> None:
    """Record that ``key`` reached ``values`` at ``point`` now (nothing when off)."""
    tracer = _TRACER
    if tracer is not None:
        tracer.event(point, key, values)
