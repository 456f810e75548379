"""A merger thread stopped by an error it cannot retry says why, instead of vanishing."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.replicate.fetch import PeerFetcher
from rt_appliance.sequencer.inputs import Inputs
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.merged import MergedLog
from rt_appliance.sequencer.merger import Merger
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.integration


def test_a_failed_sync_of_the_merged_log_stops_the_merger_and_is_reported(
    tmp_path: Path,
) -> None:
    config = load_config(write_local_config(tmp_path))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    merged = MergedLog(tmp_path / "merged")
    fetcher = PeerFetcher(config, "rt-1")
    merger = Merger(
        config,
        "rt-1",
        machine,
        merged,
        Inputs(tmp_path / "in", sync=False),
        fetcher,
        tmp_path / "log-history.jsonl",
    )

    def failing_sync() -> None:  # what the disk answers after a write error
        raise OSError(errno.EIO, "Input/output error")

    merged.sync = failing_sync  # type: ignore[method-assign]
    # Work that succeeds (no peers to copy from here): the merger then syncs, idle.
    merger._copy_stretch = lambda target: None  # type: ignore[method-assign]
    try:
        merger.start()
        with machine.cond:  # a snapshot jump: the merger has something to do
            machine.state.seq = 1
            machine.cond.notify_all()
        deadline = time.monotonic() + 10
        while merger.failure is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(merger.failure, OSError)
        assert merger.failure.errno == errno.EIO
        assert merger.halted.startswith("merger stopped: OSError")
    finally:
        merger._stop.set()
        fetcher.close()
        merged.close()
