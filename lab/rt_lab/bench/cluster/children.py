"""The publishing and subscribing applications of ``rt bench cluster``, each run as a
process of its own, as it would run on its own host::

    python -m rt_lab.bench.cluster.children publish|subscribe JSON

They talk to :class:`~rt_lab.bench.cluster.harness.Child` on stdout: ``P
<count>`` as they go, ``READY`` once warmed up (a publisher then waits for ``GO`` on
stdin) and one ``R <json>`` line with the result at the end.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from array import array
from typing import Any

from rt_appliance import trace
from rt_appliance.daemons.stop_signals import stop_event_on
from rt_appliance.publish import Publisher
from rt_appliance.subscribe import Subscriber
from rt_lab.bench.cluster.harness import BATCH, PAYLOAD_BYTES
from rt_lab.bench.stats import percentile
from rt_lab.bench.tracemap import SUBSCRIBING_APP

__all__ = ["main", "publish_child", "say", "subscribe_child"]

log = logging.getLogger(__name__)

_STDOUT = threading.Lock()


def say(line: str) -> None:
    """One whole line to the parent (the subscriber's report thread writes too)."""
    with _STDOUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


# -- publishing -------------------------------------------------------------------------

# A publisher that replicates stays until every node acknowledged what it published: the
# run needs it all, and close() alone waits a few seconds only (an application's rest
# is sent by the next sender of its directory; here there is none). A full-speed run's
# publishers finish writing well before the nodes have their copies.
REPLICATED_WAIT_S = 300.0


def publish_child(args: dict[str, Any]) -> dict[str, Any]:
    """Publish ``count`` messages (0: until SIGTERM) at ``rate`` msg/s (0: as fast as
    possible, in batches), single calls or batches; the first and last publish times."""
    stop = stop_event_on([signal.SIGTERM])
    if args["nice"]:
        os.nice(args["nice"])
    count, rate = int(args["count"]), int(args["rate"])
    if args.get("replicate"):  # the application's own push client traces as one would
        trace.start(f"push-client-{args['host']}")
    with Publisher(
        args["root"],
        args["topic"],
        args["host"],
        fsync=args["fsync"],
        roll_bytes=int(args["roll_bytes"]),
        replicate=args.get("replicate"),
    ) as pub:
        say("READY")
        sys.stdin.readline()  # GO: every publisher is ready
        cpu0 = time.process_time()
        first = time.time_ns()
        if rate == 0:
            published = _full_speed(pub, count, stop)
        elif args["single"]:
            published = _paced_single(pub, count, rate, stop)
        else:
            published = _paced_batches(pub, count, rate, float(args["tick_s"]), stop)
        last = time.time_ns()
        pub.flush()
        if args.get("replicate") and not pub.wait_acknowledged(timeout_s=REPLICATED_WAIT_S):
            log.warning("not every node acknowledged what was published")
    # every thread's CPU, the in-process push client's too, until it is closed
    cpu_s = time.process_time() - cpu0
    return {"first_ns": first, "last_ns": last, "published": published, "cpu_s": cpu_s}


def _full_speed(pub: Publisher, count: int, stop: threading.Event) -> int:
    payload = b"x" * PAYLOAD_BYTES
    batch = [payload] * BATCH
    published = 0
    while published < count and not stop.is_set():
        n = min(BATCH, count - published)
        pub.publish_batch(batch if n == BATCH else batch[:n])
        published += n
        if published % (100 * BATCH) == 0:
            say(f"P {published}")
    return published


def _paced_single(pub: Publisher, count: int, rate: int, stop: threading.Event) -> int:
    payload = b"x" * PAYLOAD_BYTES
    publish = pub.publish
    published = 0
    start = time.monotonic()
    while (count == 0 or published < count) and not stop.is_set():
        delay = start + published / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing the publish rate
        publish(payload)
        published += 1
    return published


def _paced_batches(
    pub: Publisher, count: int, rate: int, tick_s: float, stop: threading.Event
) -> int:
    """On ``tick_s`` ticks (on the tick, not after the last publish) one batch of what is
    due; ticks with nothing due are slept through (at 20 msg/s, 20 wakes a second)."""
    payload = b"x" * PAYLOAD_BYTES
    published = ticks = wakes = 0
    start = time.monotonic()
    while (count == 0 or published < count) and not stop.is_set():
        due = int((time.monotonic() - start) * rate) + 1
        if count:
            due = min(due, count)
        if due > published:
            pub.publish_batch([payload] * (due - published))
            published = due
        wakes += 1
        if wakes % 100 == 0:
            say(f"P {published}")
        # the first tick at which the next message is due
        ticks = max(ticks + 1, math.ceil(published / rate / tick_s))
        stop.wait(max(0.0, start + ticks * tick_s - time.monotonic()))  # pacing the rate
    say(f"P {published}")
    return published


# -- subscribing ------------------------------------------------------------------------


def subscribe_child(args: dict[str, Any]) -> dict[str, Any]:
    """Follow ``dir`` until ``expected`` messages are read; the first ``skip`` (the
    warm-up) are not timed. With ``latency``: each message's latency, read time minus
    its record's timestamp, summed up in ms, and with ``samples`` every one of them
    appended to that file (int64 nanoseconds, this machine's byte order)."""
    if args["nice"]:
        os.nice(args["nice"])
    expected, skip = int(args["expected"]), int(args["skip"])
    cpu0 = time.process_time()
    latencies: list[int] = []
    seen = 0
    done_ns = first_ns = 0

    def report() -> None:  # the count every 0.5 s, also while the reader waits
        shown = -1
        while True:
            time.sleep(0.5)
            if seen != shown:
                shown = seen
                say(f"P {shown}")

    threading.Thread(target=report, daemon=True, name="report").start()
    traced = trace.start(SUBSCRIBING_APP)
    if args.get("pull"):
        subscriber = Subscriber(pull=args["pull"], host=args["host"])
    else:
        subscriber = Subscriber(args["dir"])
    for batch in subscriber.read_batches(follow=True, max_messages=8192):
        now = time.time_ns()
        if traced and batch.timestamps_ns:
            trace.event("delivered", f"{batch.host}/{batch.topic}", max(batch.timestamps_ns))
        n = len(batch)
        if seen < skip:
            take = max(0, n - (skip - seen))
            timestamps = batch.timestamps_ns[n - take :]
        else:
            take, timestamps = n, batch.timestamps_ns
        before = seen
        seen += n
        if before < skip <= seen:
            cpu0 = time.process_time()
            say("READY")
        if take:
            first_ns = first_ns or now
            if args["latency"]:
                latencies.extend(now - t for t in timestamps)
        if seen >= expected:
            done_ns = now
            break
    cpu_s = time.process_time() - cpu0  # since the warm-up, every thread's
    subscriber.close()
    out: dict[str, Any] = {
        "count": seen,
        "first_ns": first_ns,
        "done_ns": done_ns,
        "cpu_s": cpu_s,
    }
    if args["latency"]:
        out["latency_ms"] = latency_summary_ms(latencies)
        if args.get("samples"):
            with open(args["samples"], "ab") as samples:
                array("q", latencies).tofile(samples)
    return out


def latency_summary_ms(latencies_ns: list[int]) -> dict[str, float]:
    """p50, p99 and max in ms, and how many samples."""
    ordered = sorted(latencies_ns)
    return {
        "p50": percentile(ordered, 50) / 1e6,
        "p99": percentile(ordered, 99) / 1e6,
        "max": percentile(ordered, 100) / 1e6,
        "samples": len(ordered),
    }


def main(argv: list[str]) -> None:
    mode, args = argv[0], json.loads(argv[1])
    # what the in-process clients did, with times, for a run that goes wrong; every
    # thread's stack on SIGUSR1 (the parent asks before it kills a child that hangs)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if mode == "publish":
        result = publish_child(args)
    elif mode == "subscribe":
        result = subscribe_child(args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    say("R " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
