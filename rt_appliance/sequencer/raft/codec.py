"""Decoding raft's bytes: plain data only, never a global (no class, no function).

Raft frames are decoded only after the TLS handshake proved the sender is a node of
this stream, and even then by an unpickler that refuses every global, so a frame can
only ever build dicts, lists, tuples, strings, bytes and numbers. pysyncobj's own
decoder of its log entries and journal meta file is replaced by the same one
(:func:`rt_appliance.sequencer.raft.patches.install`).
"""

from __future__ import annotations

import io
import logging
import pickle
from typing import Any

__all__ = ["command_loads", "dump", "dumps", "restricted_load", "restricted_loads"]

log = logging.getLogger(__name__)


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")


def restricted_loads(data: bytes | str) -> Any:
    """Unpickle plain data only: containers, strings, bytes, numbers, None, booleans."""
    if isinstance(data, str):
        data = data.encode()
    return _NoGlobals(io.BytesIO(data)).load()


def restricted_load(file: Any) -> Any:
    return _NoGlobals(file).load()


UNDECODABLE: list[Any] = [None]  # the command an undecodable log entry is applied as


def command_loads(data: bytes | str) -> Any:
    """pysyncobj's decoder for its log entries: restricted, and never stalling the log.

    An entry that does not decode is applied as our ``apply`` with empty bytes, which
    the state machine rejects on every node alike, instead of raising inside
    pysyncobj (which would retry the same entry forever).
    """
    try:
        return restricted_loads(data)
    except Exception as exc:
        if UNDECODABLE[0] is None:
            raise
        log.error("raft: a log entry does not decode (%s); applied as a rejected command", exc)
        return UNDECODABLE[0]


def dumps(obj: Any, protocol: int | None = None) -> bytes:
    return pickle.dumps(obj, protocol=4)  # bytes as bytes: no codecs global to allow


def dump(obj: Any, file: Any, protocol: int | None = None) -> None:
    pickle.dump(obj, file, protocol=4)
