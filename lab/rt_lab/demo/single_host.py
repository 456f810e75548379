"""The single-host demo: a Publisher, a following ``rt subscribe`` process, a resume, a verify.

Steps, each printed as it happens:

1. start ``rt subscribe --follow`` as a separate process on the publisher's directory;
2. publish numbered messages at ``rate`` for ``duration_s``, restarting the publisher
   halfway (a new session, ``log.2.0``) and rolling files every ``roll_bytes``;
3. wait until the subscriber has delivered every message, measuring latency;
4. resume a second ``rt subscribe`` from a stored ``next_position``;
5. ``rt log verify`` the directory;
6. write ``summary.json``: published, delivered, missing, duplicated, latency.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rt_appliance.errors import RTError
from rt_appliance.log.recovery import verify_directory
from rt_appliance.publish import Publisher
from rt_lab.bench.stats import percentile
from rt_lab.testing.cluster import wait_until

__all__ = ["DemoResult", "run_single_host"]

TOPIC, HOST = "trades", "demo-host"


@dataclass(slots=True)
class DemoResult:
    published: int = 0
    delivered: list[int] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    positions: dict[int, str] = field(default_factory=dict)  # id -> next_position

    def summary(self, directory: Path, verify_ok: bool, resume_ok: bool) -> dict[str, object]:
        ids = set(self.delivered)
        lat = self.latencies_ns

        def pct(p: float) -> float | None:
            return round(percentile(lat, p) / 1e6, 3) if lat else None

        return {
            "published": self.published,
            "delivered": len(self.delivered),
            "missing": len(set(range(1, self.published + 1)) - ids),
            "duplicated": len(self.delivered) - len(ids),
            "latency_ms": {"p50": pct(50), "p99": pct(99), "max": pct(100)},
            "directory": str(directory),
            "verify_ok": verify_ok,
            "resume_ok": resume_ok,
        }


def _rt(*args: str) -> list[str]:
    return [sys.executable, "-m", "rt_appliance.cli", *args]


def _consume(proc: subprocess.Popen[str], result: DemoResult) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        received = time.time_ns()
        message = json.loads(line)
        result.delivered.append(message["id"])
        if message["id"] > 1:  # message 1 waited for the subscriber process to start
            result.latencies_ns.append(received - message["timestamp_ns"])
        result.positions[message["id"]] = message["next_position"]


def _publish(
    root: Path,
    result: DemoResult,
    rate: int,
    duration_s: float,
    roll_bytes: int,
    say: Callable[[str], None],
) -> None:
    total = max(2, int(rate * duration_s))
    interval = 1.0 / rate
    next_id = 1
    for half, count in enumerate((total // 2, total - total // 2), start=1):
        with Publisher(root, TOPIC, HOST, fsync="batch", roll_bytes=roll_bytes) as pub:
            say(
                f"  publisher start {half}: session {pub.session}, "
                f"writing {pub.directory}/log.{pub.session}.*"
            )
            if next_id == 1:
                pub.publish(b'{"seq": 1}', id=1)
                next_id, count = 2, count - 1
                try:
                    wait_until(lambda: bool(result.delivered), 30, "the subscriber's first message")
                except TimeoutError as exc:
                    raise RTError("the subscriber process delivered nothing within 30 s") from exc
                say("  the subscriber delivered message 1: it is following")
            start = time.monotonic()
            for i in range(count):
                due = start + i * interval
                if (delay := due - time.monotonic()) > 0:
                    time.sleep(delay)  # pacing the demo's publish rate
                pub.publish(json.dumps({"seq": next_id}).encode(), id=next_id)
                next_id += 1
            pub.flush()
    result.published = next_id - 1


def run_single_host(
    workdir: Path, rate: int, duration_s: float, roll_bytes: int, say: Callable[[str], None]
) -> dict[str, object]:
    """Run the demo in ``workdir``; returns the summary also written to summary.json."""
    root = workdir / "pub"
    directory = root / f"{TOPIC}.{HOST}"
    directory.mkdir(parents=True, exist_ok=True)
    result = DemoResult()
    say(f"1. subscriber: rt subscribe --dir {directory} --follow  (a separate process)")
    proc = subprocess.Popen(
        _rt("subscribe", "--dir", str(directory), "--follow"), stdout=subprocess.PIPE, text=True
    )
    try:
        reader = threading.Thread(target=_consume, args=(proc, result), daemon=True)
        reader.start()
        say(
            f"2. publisher: {int(rate * duration_s)} messages at {rate}/s over {duration_s:g}s, "
            f"files roll every {roll_bytes} bytes, restarted halfway"
        )
        _publish(root, result, rate, duration_s, roll_bytes, say)
        say("3. waiting for the subscriber to deliver every message")
        with contextlib.suppress(TimeoutError):  # what is still missing is counted below
            wait_until(lambda: len(result.delivered) >= result.published, 30, "every message")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    resume_ok = _resume(directory, result, say)
    say(f"5. rt log verify {directory}")
    reports = verify_directory(directory)
    for r in reports:
        say(
            f"   {r.path.name:<10} {r.records:>8} records {r.valid_bytes:>10} bytes  "
            f"{'ok' if r.ok else r.tail.kind}"
        )
    summary = result.summary(directory, all(r.error is None for r in reports), resume_ok)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _resume(directory: Path, result: DemoResult, say: Callable[[str], None]) -> bool:
    """Resume from the stored next_position of the middle message: the next one must follow."""
    middle = result.published // 2
    position = result.positions.get(middle)
    if position is None:
        say("4. resume: skipped (the middle message was not delivered)")
        return False
    say(f"4. resume: rt subscribe --from {position} --limit 3  (next_position of message {middle})")
    out = subprocess.run(
        _rt("subscribe", "--dir", str(directory), "--from", position, "--limit", "3"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ids = [json.loads(line)["id"] for line in out.splitlines()]
    say(f"   delivered ids {ids}")
    return ids == list(range(middle + 1, middle + 1 + len(ids))) and len(ids) == 3
