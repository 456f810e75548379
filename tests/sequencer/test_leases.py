"""A lease granted through raft across three real node processes: one holder at a
time, and another node's job takes it once a dead holder's lease expires."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rt_appliance.sequencer.leases import LeaseView
from rt_lab.testing.cluster import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "spark-pipeline"
TTL_MS = 6000  # the shortest term rt.yaml allows


class Jobs:
    """A job per node wanting the lease, as the failover pipeline does, and a watcher
    that samples which of them trusts it (there must never be two)."""

    def __init__(self, data_dirs: dict[str, Path]) -> None:
        self.views = {n: LeaseView(d, n, NAME, TTL_MS / 1000) for n, d in data_dirs.items()}
        self.alive = set(self.views)
        self.both: list[tuple[str, ...]] = []
        self.holders: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            trusting = tuple(sorted(n for n in self.alive if self.views[n].state().trust_s > 0))
            for n in list(self.alive):
                self.views[n].want()
            if len(trusting) > 1:
                self.both.append(trusting)
            holder = trusting[0] if trusting else None
            if not self.holders or self.holders[-1][1] != holder:
                self.holders.append((time.monotonic(), holder))
            self._stop.wait(0.1)

    def holder(self) -> str | None:
        return self.holders[-1][1] if self.holders else None

    def __enter__(self) -> Jobs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _failover(tmp_path: Path) -> dict[str, object]:
    """rt.yaml's spark section: one pipeline for the stream, on shared directories."""
    shared = tmp_path / "shared"
    return {
        "enabled": True,
        "failover": True,
        "lease_ms": TTL_MS,
        "output_dir": str(shared / "output"),
        "checkpoint_dir": str(shared / "checkpoint"),
    }


def test_one_node_holds_the_lease_and_another_takes_it_when_that_node_dies(
    local_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra={"spark": _failover(tmp_path)})
    stream.start(push_clients=False, pull_clients=False)
    stream.wait_leader()
    data_dirs = {n.name: stream.config.data_dir_of(n) for n in stream.config.nodes}
    with Jobs(data_dirs) as jobs:
        wait_until(lambda: jobs.holder() is not None, 30, "a node's job to hold the lease")
        first = jobs.holder()
        assert first is not None
        wait_until(
            lambda: all(
                (n.get("leases") or {}).get(NAME, {}).get("holder") == first
                for n in stream.status()["nodes"]
            ),
            15,
            f"every node's rt status to name {first} as the holder",
        )
        text = subprocess.run(
            [
                sys.executable,
                "-m",
                "rt_appliance.cli",
                "status",
                "--config",
                str(stream.config_path),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert f"lease {NAME}: {first}," in text, text
        # the holder keeps it while it wants it: renewed, never handed on
        held_since = time.monotonic()
        wait_until(
            lambda: time.monotonic() - held_since > 1.5 * TTL_MS / 1000, 15, "a term and a half"
        )
        assert jobs.holder() == first, jobs.holders

        jobs.alive.discard(first)  # its node dies, and its job with it
        killed = time.monotonic()
        stream.kill_node(first)
        wait_until(
            lambda: jobs.holder() not in (None, first), 30, "another node's job to take the lease"
        )
        took = next(t for t, h in jobs.holders if t >= killed and h not in (None, first))
        second = jobs.holder()
        print(f"lease: {first} killed, {second} took it after {took - killed:.2f} s")
        assert took - killed < 3 * TTL_MS / 1000 + 5, jobs.holders
        assert jobs.both == [], jobs.both
        live = [n for n in stream.status()["nodes"] if n["name"] != first]
        assert all(n["leases"][NAME]["holder"] == second for n in live), live


def test_a_node_that_cannot_write_its_lease_file_keeps_running(
    local_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    stream = local_stream(nodes=3, extra={"spark": _failover(tmp_path)})
    broken = stream.config.data_dir_of(stream.config.node("rt-1"))
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "leases").write_text("not a directory\n")  # every write under it fails
    stream.start(push_clients=False, pull_clients=False)
    stream.wait_leader()
    data_dirs = {"rt-2": stream.config.data_dir_of(stream.config.node("rt-2"))}
    with Jobs(data_dirs) as jobs:
        wait_until(lambda: jobs.holder() == "rt-2", 30, "rt-2's job to hold the lease")
        log = stream.node_daemon("rt-1").log_path
        wait_until(
            lambda: "leases: cannot write spark-pipeline" in log.read_text(), 15, "the warning"
        )
    assert stream.node_daemon("rt-1").running, stream.logs()
