"""Helpers shared by the tests: waiting on conditions, reading logs back, damaging files."""

from __future__ import annotations

import asyncio
import errno
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rt_appliance import Message, Publisher, Subscriber
from rt_appliance.config import load_config
from rt_appliance.config.model import StreamConfig
from rt_appliance.log.format import encode_batch
from rt_appliance.log.recovery import FileReport, verify_directory
from rt_appliance.log.segments import list_files
from rt_appliance.position import Position
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merger import build_record
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.raft.peer import Peer
from rt_lab.testing.cluster import write_local_config

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent


def wait_until(
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.005, what: str = ""
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


def read_all(directory: Path, position: int = 0, **kwargs: object) -> list[Message]:
    """Every message of ``directory`` from ``position`` (no follow)."""
    return list(Subscriber(directory).read(position, **kwargs))  # type: ignore[arg-type]


def payloads(messages: Iterable[Message]) -> list[bytes]:
    return [m.payload for m in messages]


def crash(publisher: Publisher) -> None:
    """Stop ``publisher`` as a dead process would: no sync, descriptors gone, lock dropped."""
    writer = publisher._writer
    with publisher._lock:
        publisher._is_closed = True
        publisher._closed.set()
        if writer._fd >= 0:
            os.close(writer._fd)
            writer._fd = -1
        writer._lock.release()


def flip_byte(path: Path, offset: int, mask: int = 0xFF) -> None:
    """XOR one byte of ``path`` with ``mask``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ mask]))


def merged_records(sizes: list[int], first_seq: int = 1) -> bytes:
    """Merged-log bytes (after a file header): a range of one message per merge, of
    the given payload sizes, as the merger writes them."""
    out, start = b"", int(Position.of(1, 0, 64))
    for seq, size in enumerate(sizes, first_seq):
        data, _ = encode_batch([bytes([seq % 251]) * size], 1000, [seq])
        record, _, _ = build_record("trades.pub-1", start, 5, seq, data, None)
        out += record
        start += len(data)
    return out


def snapshot(directory: Path) -> dict[str, bytes]:
    """Name -> bytes of every stream file and the session counter of ``directory``."""
    out = {f.path.name: f.path.read_bytes() for f in list_files(directory)}
    session = directory / ".session"
    if session.exists():
        out[".session"] = session.read_bytes()
    return out


def check_whole_log(directory: Path, expected: list[bytes]) -> list[FileReport]:
    """The end-of-test check: every file verifies clean and the log reads back as ``expected``.

    Also checks that each message's ``next_position`` resumes at the following one.
    """
    reports = verify_directory(directory)
    bad = [r for r in reports if r.error is not None or r.tail.kind != "clean"]
    assert not bad, f"files that do not verify: {bad}"
    messages = read_all(directory)
    assert payloads(messages) == expected
    for before, after in pairwise(messages):
        if before.next_position != after.position:  # a file boundary: resuming must still work
            resumed = next(iter(Subscriber(directory).read(before.next_position)))
            assert resumed.position == after.position
    assert sum(r.records for r in reports) == len(expected)
    return reports


def python(code: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    """Start ``python -c code`` with this repository importable; stdout and stderr piped."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


STOP = b"__stop_following__"


class Follower:
    """Reads ``directory`` with ``follow=True`` in a thread, handing messages to a queue.

    It stops at a message whose payload is :data:`STOP`; :meth:`stop` publishes
    one (through ``stop_publisher``, a callable that publishes it) and joins.
    """

    def __init__(self, directory: Path, position: int = 0, **kwargs: object) -> None:
        self.messages: queue.Queue[Message | BaseException] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, args=(directory, position, kwargs), daemon=True
        )
        self._thread.start()

    def _run(self, directory: Path, position: int, kwargs: dict[str, object]) -> None:
        try:
            for message in Subscriber(directory).read(position, follow=True, **kwargs):  # type: ignore[arg-type]
                if message.payload == STOP:
                    return
                self.messages.put(message)
        except BaseException as exc:  # handed to the test
            self.messages.put(exc)

    def take(self, count: int, timeout: float = 10.0) -> list[Message]:
        """The next ``count`` messages, each waited for at most ``timeout`` seconds."""
        out = []
        for _ in range(count):
            try:
                item = self.messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"follower got {len(out)} of {count} messages") from None
            if isinstance(item, BaseException):
                raise item
            out.append(item)
        return out

    def nothing_more(self) -> bool:
        return self.messages.empty()

    def stop(self, publish_stop: Callable[[bytes], object]) -> None:
        if self._thread.is_alive():
            publish_stop(STOP)
            self._thread.join(timeout=10)
        assert not self._thread.is_alive()


def rt(
    *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``rt ARGS...`` as a user would; fail on a non-zero exit unless ``check`` is False."""
    result = subprocess.run(
        [sys.executable, "-m", "rt_appliance.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"rt {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


class FailFirstThreadSync:
    """``os.fdatasync`` failing once (a write-back error) when called from a worker
    thread, where grouped syncs run (a push server's, a subscriber copy's); every
    other sync works. Install it with ``monkeypatch.setattr(os, "fdatasync", ...)``."""

    def __init__(self) -> None:
        self.real, self.failures = os.fdatasync, 0

    def __call__(self, fd: int) -> None:
        if self.failures == 0 and threading.current_thread() is not threading.main_thread():
            self.failures += 1
            raise OSError(errno.EIO, "Input/output error")
        self.real(fd)


def raft_cluster(
    work: Path, nodes: int = 3
) -> tuple[StreamConfig, dict[str, SequencerMachine], dict[str, RaftNode]]:
    """A stream's configuration and, per node, a state machine and a real raft node
    (pysyncobj over mutual TLS on loopback, its journal under ``work/<node>/raft``),
    for tests that run them on one event loop."""
    config = load_config(write_local_config(work, nodes=nodes))
    machines = {n.name: SequencerMachine(config.stream, 1 << 20) for n in config.nodes}
    rafts = {
        name: RaftNode(config, name, work / name / "raft", machine)
        for name, machine in machines.items()
    }
    return config, machines, rafts


def run_rafts(nodes: dict[str, RaftNode], scenario: Callable[[], Awaitable[None]]) -> None:
    """Run every raft node of ``nodes`` on one event loop while ``scenario()`` runs, then
    stop them and release their ports and journals, whatever the scenario raised."""

    async def main() -> None:
        tasks = [asyncio.create_task(node.run()) for node in nodes.values()]
        try:
            await scenario()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        for node in nodes.values():
            node.destroy()


def watch_raft_sends(
    monkeypatch: pytest.MonkeyPatch,
    nodes: dict[str, RaftNode],
    seen: Callable[[str, str, dict[str, Any]], None],
) -> None:
    """Call ``seen(sender, receiver, message)`` for every raft message any of ``nodes``
    sends (its frame decoded), then send it as usual."""
    real_send = Peer.send

    def watching_send(peer: Peer, frame: bytes) -> bool:
        sender = next(n for n in nodes.values() if n._transport is peer.transport)
        seen(sender.name, peer.name, pickle.loads(frame[4:]))
        return real_send(peer, frame)

    monkeypatch.setattr(Peer, "send", watching_send)


async def settled_leader(nodes: dict[str, RaftNode], deadline: float) -> RaftNode:
    """The node leading with its log applied, once one is (by ``deadline``, monotonic)."""
    while not any(n.is_leader() and n.leading_settled() for n in nodes.values()):
        assert time.monotonic() < deadline, "no leader settled"
        await asyncio.sleep(0.02)
    return next(node for node in nodes.values() if node.is_leader())
