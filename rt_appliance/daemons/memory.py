"""Keeping a daemon's memory at what it holds, not at what it once held.

Replication moves frames of up to ``max_frame_bytes`` (4 MiB by default) through
buffers that live for one frame. glibc's malloc raises its mmap threshold each
time such a buffer is freed, so later ones come from the heap, and worker
threads each grow an arena of their own: freed frames then stay in the process's
RSS. Fixing the threshold at 1 MiB makes every frame-sized buffer an mmap that is
returned to the system when freed, and two arenas bound what threads keep.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

from rt_appliance.limits import MALLOC_ARENA_MAX, MMAP_THRESHOLD_BYTES

__all__ = ["return_freed_buffers"]

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # mallopt parameters, from glibc's malloc.h
_M_ARENA_MAX = -8


def return_freed_buffers() -> bool:
    """Tune glibc's malloc as above; False (and nothing done) on another C library."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_ARENA_MAX, MALLOC_ARENA_MAX)
    )
    if not ok:
        log.debug("mallopt refused the memory settings; the defaults stay")
    return ok
