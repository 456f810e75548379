"""The applications of a chaos run: publishers and subscribers that keep a journal of
what they were told and what they got, so the checker can judge the stream.

Run as ``python -m rt_lab.chaos.apps publish|subscribe ...``; the runner
starts, kills and restarts them like any daemon.

A publisher journal has one line per event, flushed at once (the checker reads
it after the run; a kill loses at most a line being written):

* ``S <incarnation>``: a (re)start;
* ``T <first> <last>``: about to publish sequence numbers (a ``.dedup`` topic: ids)
  first..last;
* ``K <last>``: ``publish_batch`` returned, so everything up to ``last`` is durable
  (``fsync=batch``): acknowledged.

A plain topic's message ``n`` of incarnation ``i`` of host ``h`` has payload
``h:i:n``. The two publishers of the ``.dedup`` topic publish ids by the same
clock from a shared epoch, payload ``q:<id>``; a restarted one resumes after its
last acknowledged id.

A subscriber journal holds ``D <topic> <host> <key>`` per message delivered
(the payload, or the id of a ``.dedup`` topic) and ``P <position>`` after each
batch. A restart cuts what follows the last ``P`` and reads on from there: the
opaque restart position, as an application would keep it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from rt_appliance.log.naming import is_dedup_topic

__all__ = ["main", "resume_point"]

TICK_S = 0.01
MAX_BATCH = 1000  # messages per publish_batch while catching up


class _Stop(Exception):
    """SIGTERM: the subscriber application stops between two batches of its journal."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def resume_point(lines: list[str]) -> tuple[int, int]:
    """(incarnation of the next start, last acknowledged number of any incarnation)."""
    incarnation, acked = 1, 0
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0] == "S":
            incarnation = int(parts[1]) + 1
        elif len(parts) == 2 and parts[0] == "K":
            acked = max(acked, int(parts[1]))
    return incarnation, acked


def publish(root: Path, topic: str, host: str, rate: float, journal: Path, epoch: float) -> None:
    """Publish until SIGTERM, which is honoured between batches (never inside a write)."""
    from rt_appliance.publish import Publisher

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    incarnation, acked = resume_point(_lines(journal))
    dedup = is_dedup_topic(topic)
    start = time.time()
    with (
        open(journal, "a") as out,
        Publisher(root, topic, host, fsync="batch", roll_bytes=1 << 20) as pub,
    ):
        out.write(f"S {incarnation}\n")
        out.flush()
        sent = acked if dedup else 0
        while not stopping:
            now = time.time()
            target = int((now - epoch if dedup else now - start) * rate)
            if target > sent:
                first, last = sent + 1, min(target, sent + MAX_BATCH)
                numbers = range(first, last + 1)
                if dedup:
                    payloads = [b"q:%d" % n for n in numbers]
                else:
                    prefix = f"{host}:{incarnation}:".encode()
                    payloads = [prefix + b"%d" % n for n in numbers]
                out.write(f"T {first} {last}\n")
                out.flush()
                pub.publish_batch(payloads, ids=list(numbers) if dedup else None)
                out.write(f"K {last}\n")
                out.flush()
                sent = last
            else:
                time.sleep(TICK_S)


def restart_position(journal: Path) -> int:
    """The position after the last whole batch of ``journal``; cuts what follows it."""
    if not journal.exists():
        return 0
    data = journal.read_bytes()
    end, position = 0, 0
    at = 0
    for line in data.splitlines(keepends=True):
        at += len(line)
        if line.startswith(b"P ") and line.endswith(b"\n"):
            end, position = at, int(line.split()[1])
    if end != len(data):
        with open(journal, "r+b") as f:
            f.truncate(end)
    return position


def subscribe(directory: Path, journal: Path) -> None:
    from rt_appliance.subscribe import Subscriber

    position = restart_position(journal)
    with open(journal, "a") as out:
        for batch in Subscriber(directory).read_batches(position, follow=True):
            if is_dedup_topic(batch.topic):
                keys = [str(i) for i in batch.ids]
            else:
                keys = [p.decode(errors="replace") for p in batch.payloads]
            head = f"D {batch.topic} {batch.host} "
            out.write("".join(f"{head}{k}\n" for k in keys))
            out.write(f"P {int(batch.next_position)}\n")
            out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rt-chaos-app", description=__doc__)
    sub = parser.add_subparsers(dest="app", required=True)
    p = sub.add_parser("publish", help="publish at a rate, journaling acknowledgements")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--rate", type=float, required=True, help="messages per second")
    p.add_argument("--journal", type=Path, required=True)
    p.add_argument("--epoch", type=float, default=0.0, help="shared start of a .dedup pair")
    s = sub.add_parser("subscribe", help="follow a copy of the merged log, journaling it")
    s.add_argument("--dir", type=Path, required=True)
    s.add_argument("--journal", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.app == "publish":
            publish(args.root, args.topic, args.host, args.rate, args.journal, args.epoch)
        else:
            signal.signal(signal.SIGTERM, _raise_stop)
            subscribe(args.dir, args.journal)
    except (_Stop, KeyboardInterrupt):
        return 0
    except BrokenPipeError:
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
