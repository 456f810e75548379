"""A push client whose connection slot fails unexpectedly stops instead of idling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.config.model import NodeConfig
from rt_appliance.replicate.push_client import PushClient
from rt_appliance.transport.session import Connection
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.integration


def test_an_unexpected_error_in_a_slot_ends_run_with_that_error(tmp_path: Path) -> None:
    config = load_config(write_local_config(tmp_path))
    client = PushClient(config, "pub-1")

    async def broken(node: NodeConfig) -> tuple[Connection, str]:
        raise ZeroDivisionError("a bug in connecting")

    client._connect = broken  # type: ignore[method-assign]

    async def run() -> None:
        await asyncio.wait_for(client.run(), 10)

    with pytest.raises(ZeroDivisionError, match="a bug in connecting"):
        asyncio.run(run())
