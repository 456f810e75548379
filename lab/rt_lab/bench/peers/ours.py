"""Our stream in the same run: ``rt bench cluster`` as a subprocess, one run each time.

It measures the same two things on a whole 3-node stream (throughput with batches of
1,000 from two publishers, latency with what is due published every 1 ms at the same
total rate) and prints its figures as JSON; this module reads the end-to-end throughput and the
latency p50, p99 and max from it, and every message's latency from the file its
``--latency-samples`` writes (for the CDF beside the peers'). It checks that the
subscriber read every message (count); the payloads carry no sequence numbers, so
duplicates and order are not checked per message.

Its :class:`OurDriver` has the peers' shape, but starts no servers itself: nothing stays
up between runs, and each run brings up (and takes down) a stream of its own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rt_lab.bench.peers.driver import Driver, Progress, RunOutcome, System, Workload

__all__ = [
    "OurDriver",
    "cluster_command",
    "has_option",
    "parse_cluster_json",
    "read_samples",
    "run_ours",
]

PUBLISHERS = 2  # rt bench cluster's publishing applications; --messages is per publisher
RUN_TIMEOUT_S = 900.0
STOP_GRACE_S = 60.0
FIGURES = {  # our name -> how the cluster bench's figure name starts
    "throughput": "end-to-end throughput",
    "p50": "publish-to-subscriber latency p50",
    "p99": "publish-to-subscriber latency p99",
    "max": "publish-to-subscriber latency max",
    "cpu_nodes": "CPU of the 3 nodes' processes",  # % of a core, during the latency run
    "cpu_clients": "CPU of the push and pull client daemons",
    "cpu_apps": "CPU of the 3 applications",
}


class OurDriver(Driver):
    """Our stream through ``rt bench cluster``, with ``extra`` options for it."""

    starts_servers = False

    def __init__(self, extra: list[str] | None = None, configuration: str = "") -> None:
        self.extra = extra or []
        self.configuration = configuration  # what ``extra`` asks for, to name if it is missing

    def skip_reason(self) -> str:
        """A row whose option this ``rt bench cluster`` lacks is skipped, not failed."""
        if not self.extra or has_option(self.extra[0]):
            return ""
        return (
            f"this version of rt bench cluster has no {self.extra[0]} option, so the "
            f"stream cannot be run with {self.configuration}"
        )

    def running(self, work: Path) -> contextlib.AbstractContextManager[System]:
        return contextlib.nullcontext(OurSystem(f"rt-appliance {_our_version()}", work, self.extra))


@dataclass(frozen=True, slots=True)
class OurSystem:
    """Our stream for a row's runs: each run in a directory of its own under ``work``."""

    version: str
    work: Path
    extra: list[str]

    def run(self, number: int, workload: Workload, progress: Progress) -> RunOutcome:
        workdir = self.work / f"run-{number}"
        return run_ours(workload.messages, workload.rate, workload.seconds, workdir,
                        self.extra, progress)  # fmt: skip


def _our_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version("rt-appliance")
    return "?"


def rt_command() -> list[str]:
    """This environment's ``rt``: the script beside this Python, else the module."""
    script = Path(sys.executable).with_name("rt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rt_appliance.cli"]


def has_option(option: str) -> bool:
    """Whether ``rt bench cluster`` takes ``option`` (read from its --help)."""
    done = subprocess.run(
        [*rt_command(), "bench", "cluster", "--help"], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and option in done.stdout


def cluster_command(
    messages: int,
    rate: int,
    seconds: float,
    workdir: Path,
    extra: list[str],
    samples: Path | None = None,
) -> list[str]:
    """The ``rt bench cluster`` arguments for one run of ``messages`` in total; with
    ``samples``, every latency goes to that file."""
    return [
        "bench", "cluster", "--runs", "1",
        "--measure", "throughput", "--measure", "latency",
        "--messages", str(max(1000, messages // PUBLISHERS)),
        "--latency-rate", str(rate),
        "--latency-seconds", f"{seconds:g}",
        "--memory-messages", "0",
        "--workdir", str(workdir),
        "--json",
        *(["--latency-samples", str(samples)] if samples is not None else []),
        *extra,
    ]  # fmt: skip


def parse_cluster_json(text: str) -> dict[str, float]:
    """The figures this bench compares, from ``rt bench cluster --json``'s output."""
    results: list[dict[str, Any]] = json.loads(text)
    found: dict[str, float] = {}
    for key, prefix in FIGURES.items():
        for result in results:
            if str(result.get("name", "")).startswith(prefix) and result.get("runs"):
                found[key] = float(result["median"])
                break
    return found


def run_ours(
    messages: int,
    rate: int,
    seconds: float,
    workdir: Path,
    extra: list[str],
    progress: Progress,
) -> RunOutcome:
    """One run of ``rt bench cluster``; failed if it exits non-zero or lacks a figure."""
    workdir.mkdir(parents=True, exist_ok=True)
    samples = workdir / "latency-samples.bin"
    argv = [*rt_command(), *cluster_command(messages, rate, seconds, workdir, extra, samples)]
    # A session of its own, so it gets exactly one SIGINT from here (on Ctrl-C, an
    # error or the timeout), on which it stops its stream and exits.
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""))
    reader.start()
    timer = threading.Timer(RUN_TIMEOUT_S, lambda: proc.send_signal(signal.SIGINT))
    timer.start()
    tail: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            progress("  " + line.rstrip())
            tail = [*tail[-19:], line.rstrip()]
        proc.wait()
    except BaseException:
        _interrupt(proc)
        raise
    finally:
        timer.cancel()
        reader.join()
    if proc.returncode != 0:
        return RunOutcome(False, f"rt bench cluster exited with {proc.returncode}: "
                                 + " / ".join(tail[-4:]))  # fmt: skip
    try:
        figures = parse_cluster_json("".join(out))
    except ValueError as exc:
        return RunOutcome(False, f"unreadable JSON from rt bench cluster: {exc}")
    missing = sorted(set(FIGURES) - set(figures))
    if missing:
        return RunOutcome(False, "rt bench cluster reported no " + ", ".join(missing))
    latencies = read_samples(samples)
    shutil.rmtree(workdir, ignore_errors=True)
    return RunOutcome(
        True,
        throughput=figures["throughput"],
        p50_ms=figures["p50"],
        p99_ms=figures["p99"],
        max_ms=figures["max"],
        cpu_servers=figures["cpu_nodes"] / 100,
        cpu_apps=(figures["cpu_apps"] + figures["cpu_clients"]) / 100,
        samples_ns=latencies,
    )


def read_samples(path: Path) -> list[int]:
    """The latencies (ns) ``rt bench cluster --latency-samples`` wrote; none if it wrote
    no file (a run without a latency run)."""
    found = array("q")
    with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
        found.frombytes(f.read())
    return found.tolist()


def _interrupt(proc: subprocess.Popen[str]) -> None:
    """SIGINT, time to stop its stream, then SIGKILL; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
