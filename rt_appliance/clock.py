"""The wall clock the daemons read, which a test can move.

Every wall-clock reading of the daemons (timestamps of merged records, the
archiver's ages, heartbeat files, the racy-mtime guard) goes through
:func:`wall_ns`. Normally that is :func:`time.time_ns`. When the environment names
a skew file (``RT_CLOCK_SKEW_FILE``), the integer of nanoseconds in it is added,
read again at most every :data:`~rt_appliance.limits.CLOCK_SKEW_REREAD_S`: ``rt chaos``
writes it to make a node's clock jump forward or back while it runs, as a stepped NTP
clock or a wrong RTC would. Timers and timeouts use :func:`time.monotonic`, which no wall-clock jump
moves, and OpenSSL checks certificates against the real clock; neither is moved.
"""

from __future__ import annotations

import os
import time

from rt_appliance.limits import CLOCK_SKEW_REREAD_S

__all__ = ["SKEW_ENV", "skew_ns", "wall", "wall_ns"]

SKEW_ENV = "RT_CLOCK_SKEW_FILE"

_path = os.environ.get(SKEW_ENV) or None
_skew = 0
_read_at = float("-inf")


def skew_ns() -> int:
    """The offset added to the real clock now (0 without a skew file)."""
    global _skew, _read_at
    if _path is None:
        return 0
    now = time.monotonic()
    if now - _read_at >= CLOCK_SKEW_REREAD_S:
        _read_at = now
        try:
            with open(_path) as f:
                _skew = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pass  # keep the last offset: a file being rewritten reads empty for a moment
    return _skew


def wall_ns() -> int:
    """Nanoseconds since the epoch, as this host's clock says."""
    return time.time_ns() + skew_ns() if _path is not None else time.time_ns()


def wall() -> float:
    """Seconds since the epoch, as this host's clock says."""
    return wall_ns() / 1e9
