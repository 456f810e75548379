"""``rt bench log``: publisher, subscriber and scan throughput, and memory over GBs.

Every figure is the median of several runs, each in a fresh directory. Memory is
measured in a child process (so earlier runs do not inflate it), sampling RSS
while it writes or reads ``memory_bytes`` of records.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rt_appliance.log.recovery import recover_last_file, verify_directory
from rt_appliance.publish import Publisher
from rt_appliance.subscribe import Subscriber
from rt_lab.bench.stats import Result, rss_bytes

__all__ = ["run_log_bench"]

TOPIC, HOST = "bench", "bench-host"


def _publish_batches(root: Path, payloads: list[bytes], batches: int, fsync: str) -> float:
    with Publisher(root, TOPIC, HOST, fsync=fsync) as pub:
        start = time.perf_counter()
        for _ in range(batches):
            pub.publish_batch(payloads)
        pub.flush()
        elapsed = time.perf_counter() - start
    return len(payloads) * batches / elapsed


def _publish_singles(root: Path, payload: bytes, count: int) -> float:
    with Publisher(root, TOPIC, HOST, fsync="never") as pub:
        publish = pub.publish
        start = time.perf_counter()
        for _ in range(count):
            publish(payload)
        elapsed = time.perf_counter() - start
    return count / elapsed


def _subscribe(directory: Path) -> float:
    start = time.perf_counter()
    count = sum(len(batch) for batch in Subscriber(directory).read_batches(max_messages=8192))
    return count / (time.perf_counter() - start)


def _verify(directory: Path) -> float:
    start = time.perf_counter()
    records = sum(r.records for r in verify_directory(directory))
    return records / (time.perf_counter() - start)


def _recovery(directory: Path) -> float:
    start = time.perf_counter()
    recover_last_file(directory)
    elapsed = time.perf_counter() - start
    return verify_directory(directory)[-1].records / elapsed


def run_log_bench(
    workdir: Path,
    payload_bytes: int,
    messages: int,
    runs: int,
    memory_bytes: int,
    progress: Callable[[str], None],
) -> list[Result]:
    """Run every log benchmark; returns the results (medians over ``runs``)."""
    payload = b"x" * payload_bytes
    batch = [payload] * 1000
    batches = max(1, messages // 1000)
    results = {
        "batch_never": Result(
            "batch publish, fsync=never, batches of 1,000", "msg/s", ">= 1,500,000"
        ),
        "single_never": Result("single-call publish, fsync=never", "msg/s", ">= 400,000"),
        "batch_batch": Result(
            "batch publish, fsync=batch, batches of 1,000", "msg/s", ">= 1,000,000"
        ),
        "subscribe": Result("batch subscribe (read_batches)", "msg/s", ">= 1,500,000"),
        "verify": Result("rt log verify scan", "records/s", ">= 1,500,000"),
        "recovery": Result(
            "writer-start recovery scan of the last file", "records/s", ">= 1,500,000"
        ),
    }
    for run in range(1, runs + 1):
        progress(f"run {run}/{runs}")
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            root = Path(tmp)
            directory = root / f"{TOPIC}.{HOST}"
            results["batch_never"].values.append(_publish_batches(root, batch, batches, "never"))
            results["subscribe"].values.append(_subscribe(directory))
            results["verify"].values.append(_verify(directory))
            results["recovery"].values.append(_recovery(directory))
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            results["single_never"].values.append(
                _publish_singles(Path(tmp), payload, min(messages, 1_000_000))
            )
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            results["batch_batch"].values.append(
                _publish_batches(Path(tmp), batch, batches, "batch")
            )
    out = list(results.values())
    if memory_bytes:
        progress(f"memory: writing and reading {memory_bytes / 1e9:.1f} GB")
        out.extend(_memory_results(workdir, payload_bytes, memory_bytes))
    return out


def _memory_results(workdir: Path, payload_bytes: int, total_bytes: int) -> list[Result]:
    tmp = Path(tempfile.mkdtemp(dir=workdir))
    try:
        pub = _child(["publish", str(tmp), str(payload_bytes), str(total_bytes)])
        sub = _child(["subscribe", str(tmp / f"{TOPIC}.{HOST}"), "0", "0"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    gb = f"{total_bytes / 1e9:.1f} GB"
    return [
        Result(
            f"publisher RSS growth writing {gb}",
            "MB",
            "<= 50",
            [pub["growth"] / 1e6],
            f"start {pub['start'] / 1e6:.0f} MB, peak {pub['peak'] / 1e6:.0f} MB",
        ),
        Result(
            f"subscriber RSS growth reading {gb}",
            "MB",
            "<= 50",
            [sub["growth"] / 1e6],
            f"start {sub['start'] / 1e6:.0f} MB, peak {sub['peak'] / 1e6:.0f} MB",
        ),
    ]


def _child(args: list[str]) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-m", "rt_lab.bench.log_bench", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return result


def _memory_child(mode: str, path: str, payload_bytes: int, total_bytes: int) -> dict[str, int]:
    """Write or read ``total_bytes`` while sampling RSS; runs in a child process."""
    start = peak = rss_bytes()
    if mode == "publish":
        batch = [b"m" * payload_bytes] * 1000
        batches = total_bytes // ((payload_bytes + 28) * 1000)
        with Publisher(path, TOPIC, HOST, fsync="never") as pub:
            for i in range(batches):
                pub.publish_batch(batch)
                if i % 256 == 0:
                    peak = max(peak, rss_bytes())
    else:
        for i, _batch in enumerate(Subscriber(path).read_batches(max_messages=8192)):
            if i % 64 == 0:
                peak = max(peak, rss_bytes())
    peak = max(peak, rss_bytes())
    return {"start": start, "peak": peak, "growth": peak - start}


if __name__ == "__main__":
    print(json.dumps(_memory_child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
