"""A :class:`threading.Event` set by SIGTERM/SIGINT, safely.

A Python signal handler runs on the main thread between two bytecodes, possibly
while that thread holds the event's own lock inside ``Event.wait()``. Calling
``event.set()`` right there takes the same, non-reentrant lock and hangs the process
for good (a stop that never ends, until SIGKILL). The handler here hands the
``set()`` to a short-lived thread, which simply waits for the lock to be free.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType

__all__ = ["stop_event_on"]

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_event_on(signals: Iterable[signal.Signals] = DEFAULT_SIGNALS) -> threading.Event:
    """An event that any of ``signals`` sets; call from the main thread."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=stop.set, name="stop-signal", daemon=True).start()

    for sig in signals:
        signal.signal(sig, on_signal)
    return stop
