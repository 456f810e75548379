"""A follower whose leader cannot be reached backs off instead of retrying at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

from rt_appliance.certs.files import init_for_config
from rt_appliance.config import load_config
from rt_appliance.sequencer.control import Reporter
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.unit


def test_failed_reports_back_off_while_input_keeps_changing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))
    init_for_config(config, Path(config.tls.dir_of("rt-1")), days=1, force=True)
    changed = asyncio.Event()

    async def scenario() -> None:
        reporter = Reporter(config, "rt-1", lambda: "rt-2", lambda: {"extents": {}}, changed)
        task = asyncio.create_task(reporter.run())

        async def churn() -> None:  # input changes all the time, as under load
            while True:
                changed.set()
                await asyncio.sleep(0.001)

        churner = asyncio.create_task(churn())
        await asyncio.sleep(1.0)
        for t in (task, churner):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t

    with caplog.at_level(logging.INFO, logger="rt_appliance.sequencer.control"):
        asyncio.run(scenario())
    failures = [r for r in caplog.records if "report to rt-2 failed" in r.getMessage()]
    # nobody listens on rt-2's control port: 0.05 + 0.1 + 0.2 + 0.4 s of backoff fit in 1 s
    assert 2 <= len(failures) <= 6, len(failures)
