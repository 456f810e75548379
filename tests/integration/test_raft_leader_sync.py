"""A leader sends its entries before its own journal sync, but no commit beyond it.

Three real raft nodes (pysyncobj over mutual TLS on loopback, synced journals) on one
event loop. The leader's background journal syncs are slowed, so its followers answer
first and pysyncobj counts the leader toward commits its disk does not hold yet. Every
frame the leader sends is read back: entries leave while its journal is not yet synced,
so both syncs run at once, but the commit index a frame carries never exceeds what the
leader's own syncs cover. Otherwise a follower could apply an entry that only it and an
unsynced leader hold, and a power loss of the leader would take it from the majority.
Two guards keep it so: the leader applies an entry only once a sync covered it
(``RaftNode``'s apply), and the transport caps the commit index it sends.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from rt_appliance.limits import RAFT_SYNCS_IN_FLIGHT
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.raft.journal import SyncedJournal, fsync_and_close
from rt_appliance.sequencer.raft.peer import Peer
from rt_appliance.transport import filesync
from tests.helpers import raft_cluster, run_rafts

pytestmark = pytest.mark.integration

PROPOSALS = 40
SLOW_SYNC_S = 0.1


def test_entries_leave_before_the_leaders_sync_but_commits_only_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config, machines, nodes = raft_cluster(tmp_path)
    sent: list[tuple[str, int, int, bool, int]] = []  # (from, commit, synced, dirty, entries)
    real_send = Peer.send

    def watching_send(peer: Peer, frame: bytes) -> bool:
        message = pickle.loads(frame[4:])
        sender = next(n for n in nodes.values() if n._transport is peer.transport)
        journal = sender._link.journal()
        if message.get("type") == "append_entries" and journal is not None:
            sent.append(
                (
                    sender.name,
                    int(message["commit_index"]),
                    journal.synced_index,
                    journal.dirty,
                    len(message.get("entries") or ()),
                )
            )
        return real_send(peer, frame)

    monkeypatch.setattr(Peer, "send", watching_send)
    slow_inode: list[int] = []  # the leader's journal, once there is a leader

    def slow_background_fsync(fd: int) -> None:
        in_background = threading.current_thread() is not threading.main_thread()
        if in_background and slow_inode and os.fstat(fd).st_ino == slow_inode[0]:
            time.sleep(SLOW_SYNC_S)
        fsync_and_close(fd)

    monkeypatch.setenv(filesync.ENV, "threads")  # the slow syncs are the worker threads'
    monkeypatch.setattr(SyncedJournal, "fsync", staticmethod(slow_background_fsync))
    decided: list[bool] = []

    run_rafts(nodes, lambda: _propose_to_the_leader(nodes, machines, slow_inode, decided, 0))

    assert len(decided) == PROPOSALS
    # every node applied the same commands: the same state
    states = [m.state.to_json() for m in machines.values()]
    assert all(state == states[0] for state in states)
    early = [s for s in sent if s[3] and s[4] > 0]
    assert early, "no entries left a leader before its journal sync"
    too_far = [s for s in sent if s[1] > s[2]]
    assert not too_far, f"a commit index beyond the leader's synced journal was sent: {too_far}"


def test_entries_written_while_a_sync_runs_get_a_sync_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader's journal sync that takes long does not hold the next entries back until
    its end: a second sync starts for them at once, never more than
    ``RAFT_SYNCS_IN_FLIGHT``, and every node applies every entry, in the same order."""
    _config, machines, nodes = raft_cluster(tmp_path)
    lock = threading.Lock()
    slow_inode: list[int] = []  # the leader's journal, once there is a leader
    running: dict[int, int] = {}  # inode: syncs of it running now
    most: dict[int, int] = {}  # inode: most syncs of it running at once

    def slow_fsync(fd: int) -> None:
        inode = os.fstat(fd).st_ino
        if inode not in slow_inode:
            fsync_and_close(fd)
            return
        with lock:
            running[inode] = running.get(inode, 0) + 1
            most[inode] = max(most.get(inode, 0), running[inode])
        try:
            time.sleep(SLOW_SYNC_S)
            fsync_and_close(fd)
        finally:
            with lock:
                running[inode] -= 1

    monkeypatch.setenv(filesync.ENV, "threads")  # the slow syncs are the worker threads'
    monkeypatch.setattr(SyncedJournal, "fsync", staticmethod(slow_fsync))
    decided: list[bool] = []

    # one proposal every 10 ms: several are written during each slow sync
    pause_s = SLOW_SYNC_S / 10
    run_rafts(nodes, lambda: _propose_to_the_leader(nodes, machines, slow_inode, decided, pause_s))

    assert len(decided) == PROPOSALS
    states = [m.state.to_json() for m in machines.values()]
    assert all(state == states[0] for state in states)
    assert most == {slow_inode[0]: RAFT_SYNCS_IN_FLIGHT}, most


async def _propose_to_the_leader(
    nodes: dict[str, RaftNode],
    machines: dict[str, SequencerMachine],
    slow_inode: list[int],
    decided: list[bool],
    pause_s: float,
) -> None:
    """Once a leader is elected, name its journal in ``slow_inode``, propose ``PROPOSALS``
    prunes to it ``pause_s`` apart (the state takes them in any order), and wait until
    each was decided and every node applied them all."""
    deadline = time.monotonic() + 30
    while not any(node.is_leader() for node in nodes.values()):
        assert time.monotonic() < deadline, "no leader was elected"
        await asyncio.sleep(0.02)
    leader = next(node for node in nodes.values() if node.is_leader())
    journal = leader._link.journal()
    assert journal is not None
    slow_inode.append(os.stat(journal.path).st_ino)
    for below in range(1, PROPOSALS + 1):
        command = b'{"t":"prune","below":%d,"reason":"x","ts":1}' % below
        leader.propose(command, lambda ok, why: decided.append(ok))
        await asyncio.sleep(pause_s)
    while len(decided) < PROPOSALS or any(
        m.state.rejected + m.state.prunes < PROPOSALS for m in machines.values()
    ):
        assert time.monotonic() < deadline, "the proposals were not all applied"
        await asyncio.sleep(0.02)
