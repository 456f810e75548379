"""EIO on the leader's raft journal sync: the leader stops, another node leads within an
election timeout, and the old leader, restarted with a disk that works, catches up.

Three real raft nodes (pysyncobj over mutual TLS on loopback, synced journals) on one
event loop. After a failed fsync the kernel may have dropped the pages it could not
write, so the node trusts no later sync: it sends nothing more and stops (the daemon
exits and its unit restarts it), which its followers see as a leader gone.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

import pytest

from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.raft.journal import SyncedJournal, fsync_and_close
from rt_appliance.transport import filesync
from tests.helpers import raft_cluster

pytestmark = pytest.mark.integration

BOUND_S = 5.0  # an election (at most raft_max_timeout_ms, 1 s) with room for a busy machine


def _prune(below: int) -> bytes:
    return b'{"t":"prune","below":%d,"reason":"x","ts":1}' % below


def test_eio_on_the_leaders_journal_sync_hands_the_stream_to_another_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, machines, nodes = raft_cluster(tmp_path)
    broken: list[int] = []  # the inode of the journal whose disk fails

    def fsync(fd: int) -> None:
        if broken and os.fstat(fd).st_ino == broken[0]:
            os.close(fd)
            raise OSError(errno.EIO, "Input/output error")
        fsync_and_close(fd)

    # the failure comes through the worker thread's sync (the kernel's reports an error
    # the same way: tests/unit/test_filesync.py)
    monkeypatch.setenv(filesync.ENV, "threads")
    monkeypatch.setattr(SyncedJournal, "fsync", staticmethod(fsync))
    decided: list[tuple[str, str]] = []  # (proposer, why not accepted)

    async def wait(condition, what: str, timeout_s: float = 30.0) -> float:  # type: ignore[no-untyped-def]
        start = time.monotonic()
        while not condition():
            assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}"
            await asyncio.sleep(0.01)
        return time.monotonic() - start

    def applied(names: list[str], count: int) -> bool:
        return all(machines[n].state.prunes + machines[n].state.rejected >= count for n in names)

    async def scenario() -> tuple[str, str, float]:
        tasks = {name: asyncio.create_task(node.run()) for name, node in nodes.items()}
        try:
            await wait(lambda: any(n.is_leader() for n in nodes.values()), "a leader")
            old = next(name for name, n in nodes.items() if n.is_leader())
            for below in range(1, 11):
                nodes[old].propose(_prune(below), lambda ok, why: decided.append((old, why)))
            await wait(lambda: applied(list(nodes), 10), "the first ten on every node")

            journal = nodes[old]._link.journal()
            assert journal is not None
            broken.append(os.stat(journal.path).st_ino)
            nodes[old].propose(_prune(11), lambda ok, why: decided.append((old, why)))
            await wait(lambda: nodes[old].failure is not None, "the leader's sync to fail")
            failed_at = time.monotonic()
            tasks[old].cancel()  # the daemon stops on it
            await asyncio.gather(tasks[old], return_exceptions=True)
            nodes[old].destroy()
            others = [name for name in nodes if name != old]
            await wait(lambda: any(nodes[n].is_leader() for n in others), "another leader", BOUND_S)
            took = time.monotonic() - failed_at
            new = next(n for n in others if nodes[n].is_leader())
            for below in range(12, 21):
                nodes[new].propose(_prune(below), lambda ok, why: decided.append((new, why)))
            await wait(lambda: applied(others, 19), "the new leader's proposals")

            # the old leader's disk works again: restarted, it catches up
            broken.clear()
            machines[old] = SequencerMachine(config.stream, 1 << 20)
            nodes[old] = RaftNode(config, old, tmp_path / old / "raft", machines[old])
            tasks[old] = asyncio.create_task(nodes[old].run())
            await wait(
                lambda: machines[old].state.to_json() == machines[new].state.to_json(),
                "the old leader to catch up",
            )
            return old, new, took
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    try:
        old, new, took = asyncio.run(scenario())
    finally:
        for node in nodes.values():
            node.destroy()

    assert old != new and took < BOUND_S
    # all nine committed (and then rejected by the state: a prune of nothing merged)
    assert [why for name, why in decided if name == new] == ["rejected by the state machine"] * 9
    states = [m.state.to_json() for m in machines.values()]
    assert all(state == states[0] for state in states)
    assert states[0]["prunes"] + states[0]["rejected"] >= 19
