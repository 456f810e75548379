"""The CPU scheduling policy of rt's own threads: ``SCHED_BATCH``.

Every step of a message's path ends in a write to a local TCP connection. On Linux
that write runs the receiver's side of the loopback at once and wakes the receiving
thread with a hint that the writer will soon wait, so the scheduler puts the
receiver on the writer's core and lets it preempt the writer in the middle of its
loop turn. A node's event loop then stands still inside most of its writes: at
5,000 msg/s a TLS write of the leader took 44 us of its CPU and 183 us of its time
(docs/BENCHMARKS.md, "Batch scheduling").

A thread under ``SCHED_BATCH`` is woken like any other but does not preempt the
thread that woke it: the writer finishes its turn (and sends what else it has),
then the reader runs, on the other core if one is free or when the writer waits.
Its share of the CPU is the same (nice 0); only the wake-up preemption goes.

The policy is per thread and inherited by the threads a thread starts. A daemon
sets it for itself before it starts any thread (:func:`run_daemon`); an
application's in-process clients set it on their own thread only, never on the
application's. A systemd unit of rt sets it with ``CPUSchedulingPolicy=batch``,
since its system call filter refuses the call. ``RT_SCHEDULING=normal`` keeps the
kernel's default policy (to compare the two, or to rule it out).
"""

from __future__ import annotations

import logging
import os

from rt_appliance.errors import UsageError

__all__ = ["ENV", "batch_this_thread"]

log = logging.getLogger(__name__)

ENV = "RT_SCHEDULING"


def batch_this_thread() -> bool:
    """Put the calling thread under ``SCHED_BATCH`` (and the threads it starts from now
    on), unless ``RT_SCHEDULING=normal``. True if it now runs under that policy.

    A system without the policy, or one that refuses the call (a seccomp filter, a
    container), leaves the thread as it was: that costs latency under load, nothing
    else, and is logged at debug level.
    """
    choice = os.environ.get(ENV, "batch")
    if choice == "normal":
        return False
    if choice != "batch":
        raise UsageError(f"{ENV}={choice!r}: expected batch (the default) or normal")
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None:
        return False
    try:
        if os.sched_getscheduler(0) == batch:
            return True  # already (a unit's CPUSchedulingPolicy=batch, a parent thread)
        os.sched_setscheduler(0, batch, os.sched_param(0))
    except OSError as exc:
        log.debug("SCHED_BATCH refused (%s): this thread keeps its scheduling policy", exc)
        return False
    return True
