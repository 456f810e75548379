"""The event loop every daemon and in-process client runs on: uvloop's.

uvloop (libuv) runs the same asyncio code with less CPU per wake and per TLS record
than asyncio's own loop (``rt bench floor --loop both``), and a message's path is made
of such steps. ``RT_EVENT_LOOP=asyncio`` selects asyncio's own loop instead (to compare
the two, or to rule the loop out when chasing a problem).
"""

from __future__ import annotations

import asyncio
import os

import uvloop

from rt_appliance.errors import UsageError

__all__ = ["ENV", "new_loop"]

ENV = "RT_EVENT_LOOP"


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of the kind ``RT_EVENT_LOOP`` names (default: uvloop)."""
    choice = os.environ.get(ENV, "uvloop")
    if choice == "asyncio":
        return asyncio.new_event_loop()
    if choice != "uvloop":
        raise UsageError(f"{ENV}={choice!r}: expected uvloop (the default) or asyncio")
    return uvloop.new_event_loop()
