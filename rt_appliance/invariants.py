"""Invariant checks that survive ``python -O``.

An invariant is a fact the code relies on; when it is false there is a bug, and
the only safe move is to stop. :class:`InvariantError` deliberately does not
derive from :class:`rt_appliance.errors.RTError`, so no handler of operating
errors catches it; under systemd the process restarts into recovery.
"""

from __future__ import annotations

__all__ = ["InvariantError", "invariant"]


class InvariantError(AssertionError):
    """A broken invariant: a bug, never an operating error."""


def invariant(condition: bool, message: str) -> None:
    """Raise :class:`InvariantError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InvariantError(message)
