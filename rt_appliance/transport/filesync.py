"""Syncs of files that the event loop starts itself and hears the end of, with no thread.

A sync handed to a worker thread (:mod:`.offload`) needs the interpreter lock three
times: for the worker to take the call, to return from ``fsync``, and to hand the result
back; on a busy node each is a wait, and each is a chance for the worker to hold the
lock while the loop waits for it. On a raft leader at 5,000 msg/s the loop's thread was
blocked in futex waits (the lock, the merger's condition) a fifth of the time, and the
four workers woke about 2,000 times a second each for some 800 syncs a second
(docs/BENCHMARKS.md, "Raft journal syncs handed to the kernel").

Here Linux's native asynchronous I/O takes the sync instead: ``io_submit`` with
``IOCB_CMD_FSYNC`` (or ``IOCB_CMD_FDSYNC``) queues it to a kernel worker at once (Linux
4.18 and later), and its end is counted on an eventfd the loop watches. The system calls
are made through :class:`ctypes.PyDLL`, which keeps the interpreter lock: none of them
blocks (a submission, a look at what ended, an eventfd's count, a close), and each
release of the lock on the loop's thread is a chance for another thread to take it.

One AIO context per event loop, made at its first sync and released when the loop is
collected. A sync the kernel does not take runs on the offload pool as before: no such
interface here (another kernel, architecture or byte order), ``io_setup`` refused (a
system call filter, ``fs.aio-max-nr`` reached), a file system without it, or a context
with ``_EVENTS`` syncs in flight. ``RT_FILE_SYNC=threads`` keeps every sync there.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import platform
import sys
import weakref
from collections.abc import Callable
from typing import Any, Final

from rt_appliance.errors import UsageError
from rt_appliance.transport.offload import in_thread

__all__ = ["ENV", "kernel_syncs", "mode", "sync_and_close"]

log = logging.getLogger(__name__)

ENV: Final = "RT_FILE_SYNC"

# io_setup, io_destroy, io_getevents, io_submit, by machine (the generic numbers on arm64)
_SYSCALLS: Final = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_FSYNC, _IOCB_CMD_FDSYNC = 2, 3
_IOCB_FLAG_RESFD = 1
_EVENTS = 256  # syncs one context has in flight at most; more run on the offload pool
_REAP_AT_ONCE = 64


class _Iocb(ctypes.Structure):  # struct iocb (linux/aio_abi.h), little-endian
    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class _Event(ctypes.Structure):  # struct io_event
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Libc:
    """The C library's calls the rings make, keeping the interpreter lock."""

    def __init__(self) -> None:
        self.setup, self.destroy, self.getevents, self.submit = _SYSCALLS[platform.machine()]
        libc = ctypes.PyDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        self.read = libc.read
        self.read.restype = ctypes.c_ssize_t
        self.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        self.close = libc.close
        self.close.restype = ctypes.c_int
        self.close.argtypes = [ctypes.c_int]


def _load() -> _Libc | None:
    if sys.platform != "linux" or sys.byteorder != "little":
        return None
    if platform.machine() not in _SYSCALLS:
        return None
    try:
        return _Libc()
    except (OSError, AttributeError):
        return None


_LIBC = _load()
_NO_WAIT = _Timespec(0, 0)


def settle(future: asyncio.Future[None], res: int) -> None:
    """Settle ``future`` with the result of a sync as the kernel reports it (``res``:
    0, or minus an errno)."""
    if future.cancelled():
        return
    if res < 0:
        future.set_exception(OSError(-res, os.strerror(-res)))
    else:
        future.set_result(None)


class _Ring:
    """One event loop's AIO context and the eventfd its ends are counted on."""

    def __init__(self, libc: _Libc, loop: asyncio.AbstractEventLoop) -> None:
        self._libc = libc
        ctx = ctypes.c_ulong(0)
        if libc.syscall(libc.setup, _EVENTS, ctypes.byref(ctx)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"io_setup: {os.strerror(err)}")
        self._ctx = ctx
        try:
            self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            libc.syscall(libc.destroy, ctx)
            raise
        # by token: the future a sync settles and the descriptor it closes. Nothing here
        # holds the loop but the futures in flight, so the loop can be collected
        self._futures: dict[int, asyncio.Future[None]] = {}
        self._fds: dict[int, int] = {}
        self._next = 0
        self._iocb = _Iocb()
        self._iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._events = (_Event * _REAP_AT_ONCE)()
        self._count = ctypes.create_string_buffer(8)
        loop.add_reader(self._efd, self._reap)
        # released with the loop: the context (io_destroy waits for the syncs in flight),
        # the eventfd, and the descriptors those syncs held
        weakref.finalize(loop, _release, libc, ctx.value, self._efd, self._fds)

    @property
    def in_flight(self) -> int:
        return len(self._futures)

    def submit(
        self, loop: asyncio.AbstractEventLoop, fd: int, data_only: bool
    ) -> asyncio.Future[None] | None:
        """A future of the sync of ``fd``, which is closed when it ends; None: the kernel
        did not take it (``ctypes.get_errno()`` says why, 0 for a full context)."""
        if len(self._futures) >= _EVENTS:
            ctypes.set_errno(0)
            return None
        self._next += 1
        iocb = self._iocb
        ctypes.memset(ctypes.byref(iocb), 0, ctypes.sizeof(iocb))
        iocb.aio_data = self._next
        iocb.aio_lio_opcode = _IOCB_CMD_FDSYNC if data_only else _IOCB_CMD_FSYNC
        iocb.aio_fildes = fd
        iocb.aio_flags = _IOCB_FLAG_RESFD
        iocb.aio_resfd = self._efd
        libc = self._libc
        if libc.syscall(libc.submit, self._ctx, 1, self._iocbs) != 1:
            return None
        future: asyncio.Future[None] = loop.create_future()
        self._futures[self._next] = future
        self._fds[self._next] = fd
        return future

    def _reap(self) -> None:
        """The eventfd counted ends: settle every sync that ended."""
        libc = self._libc
        if libc.read(self._efd, self._count, 8) != 8:
            return  # counted nothing (EAGAIN): a wake for ends an earlier call took
        while self._futures:
            got = libc.syscall(
                libc.getevents, self._ctx, 0, _REAP_AT_ONCE, self._events, ctypes.byref(_NO_WAIT)
            )
            if got <= 0:
                return
            for event in self._events[:got]:
                libc.close(self._fds.pop(event.data))
                settle(self._futures.pop(event.data), event.res)
            if got < _REAP_AT_ONCE:
                return


def _release(libc: _Libc, ctx: int, efd: int, fds: dict[int, int]) -> None:
    libc.syscall(libc.destroy, ctypes.c_ulong(ctx))
    for fd in fds.values():
        os.close(fd)
    fds.clear()
    os.close(efd)


_rings: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ring | None] = (
    weakref.WeakKeyDictionary()
)
_told_why = False


def mode() -> str:
    """``kernel`` or ``threads``, as ``RT_FILE_SYNC`` asks (UsageError for another value)."""
    choice = os.environ.get(ENV, "kernel")
    if choice not in ("kernel", "threads"):
        raise UsageError(f"{ENV}={choice!r}: expected kernel (the default) or threads")
    return choice


def _ring(loop: asyncio.AbstractEventLoop) -> _Ring | None:
    global _told_why
    if loop in _rings:
        return _rings[loop]
    ring, why = None, ""
    if mode() == "threads":
        why = f"{ENV}=threads"
    elif _LIBC is None:
        why = f"no native asynchronous I/O here ({sys.platform}, {platform.machine()})"
    else:
        try:
            ring = _Ring(_LIBC, loop)
        except OSError as exc:
            why = str(exc)
    if ring is None and not _told_why:
        log.info("file syncs run on worker threads: %s", why)
        _told_why = True
    _rings[loop] = ring
    return ring


def kernel_syncs() -> bool:
    """Whether the running loop's syncs go to the kernel (the first call makes its ring)."""
    return _ring(asyncio.get_running_loop()) is not None


def _sync_and_close(fd: int, data_only: bool) -> None:
    try:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_and_close(
    fd: int, *, data_only: bool = False, on_thread: Callable[[int], Any] | None = None
) -> asyncio.Future[None]:
    """fsync ``fd`` (``data_only``: fdatasync) and close it; a future of the running loop
    settles when the sync ended (OSError: it failed, as the system call reports it). Call
    it on the loop's thread. The descriptor is closed only once the sync has ended, even
    if the future is cancelled meanwhile: never under a running sync. ``on_thread(fd)``
    syncs and closes it where the kernel does not take it, on the offload pool (by
    default the system call named)."""
    loop = asyncio.get_running_loop()
    ring = _ring(loop)
    if ring is not None:
        future = ring.submit(loop, fd, data_only)
        if future is not None:
            return future
        err = ctypes.get_errno()
        if err:
            log.debug("io_submit refused a sync (%s); on a worker thread", os.strerror(err))
    if on_thread is not None:
        return in_thread(on_thread, fd)
    return in_thread(_sync_and_close, fd, data_only)
