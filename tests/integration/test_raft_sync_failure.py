"""A raft journal sync that fails stops the node instead of trusting a later sync."""

from __future__ import annotations

import asyncio
import errno
import time
from pathlib import Path

import pytest

import rt_appliance.sequencer.raft.journal as journal_module
from rt_appliance.config import load_config
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.transport import filesync
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.integration


def test_a_failed_journal_sync_stops_raft_and_applies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(write_local_config(tmp_path, nodes=1))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    node = RaftNode(config, "rt-1", tmp_path / "raft", machine)
    applied: list[bool] = []
    monkeypatch.setenv(filesync.ENV, "threads")  # the failure comes through a worker's sync

    def failing_fsync(fd: int) -> None:  # what the disk answers after a write error
        journal_module.os.close(fd)
        raise OSError(errno.EIO, "Input/output error")

    async def scenario() -> None:
        task = asyncio.create_task(node.run())
        try:
            deadline = time.monotonic() + 20
            while not node.is_leader():  # a single node elects itself
                assert time.monotonic() < deadline, "the node never led"
                await asyncio.sleep(0.02)
            monkeypatch.setattr(journal_module, "fsync_and_close", failing_fsync)
            node.propose(b'{"t":"prune","below":1,"reason":"x","ts":1}', lambda ok, why: None)
            while node.failure is None:
                assert time.monotonic() < deadline, "the failed sync went unnoticed"
                await asyncio.sleep(0.02)
            applied.append(machine.state.rejected + machine.state.prunes > 0)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        node.destroy()
    assert isinstance(node.failure, OSError) and node.failure.errno == errno.EIO
    assert applied == [False], "an entry was applied although its sync failed"
