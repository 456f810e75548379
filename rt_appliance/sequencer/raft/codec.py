"""Decoding raft's bytes: plain data only, never a global (no class, no function).

Raft frames are decoded only after the TLS handshake proved the sender is a node of
this stream, and even then by an unpickler that refuses every global, so a frame can
only ever build dicts, lists, tuples, strings, bytes and numbers. pysyncobj's own
decoder of its log entries and journal meta file is replaced by the same one
(:func:`rt_appliance.sequencer.raft.patches.install`).

Before the unpickler sees them, the bytes are walked opcode by opcode
(:func:`check_opcodes`): only the opcodes :func:`dumps` writes for plain data pass.
Refusing the globals is not enough: CPython's unpickler grows its memo to twice the
index a ``PUT`` names and fills it, so 9 bytes naming index 2**26 cost a gigabyte
and 2**32 would ask for 64 GiB; :func:`dumps` (protocol 4) numbers its memo with
``MEMOIZE``, one entry per object it wrote, and never writes a ``PUT``. The walk
costs more than the decoding itself, on every frame: a price paid for refusing a
frame before it can allocate (the measured cost is in docs/BENCHMARKS.md, "Figures
behind the limits and defaults").
"""

from __future__ import annotations

import io
import logging
import pickle
from typing import Any

__all__ = ["check_opcodes", "command_loads", "dump", "dumps", "restricted_load", "restricted_loads"]

log = logging.getLogger(__name__)


def _opcode_table() -> list[tuple[int, int] | None]:
    """For each opcode byte: (bytes of its argument, bytes of a length before its
    payload), or None for an opcode plain data never needs."""
    p = pickle
    fixed = {
        p.PROTO: 1, p.FRAME: 8, p.STOP: 0, p.MARK: 0, p.POP: 0, p.POP_MARK: 0, p.DUP: 0,
        p.NONE: 0, p.NEWTRUE: 0, p.NEWFALSE: 0, p.BININT: 4, p.BININT1: 1, p.BININT2: 2,
        p.BINFLOAT: 8, p.EMPTY_DICT: 0, p.SETITEM: 0, p.SETITEMS: 0, p.EMPTY_LIST: 0,
        p.APPEND: 0, p.APPENDS: 0, p.EMPTY_TUPLE: 0, p.TUPLE: 0, p.TUPLE1: 0, p.TUPLE2: 0,
        p.TUPLE3: 0, p.EMPTY_SET: 0, p.ADDITEMS: 0, p.FROZENSET: 0, p.MEMOIZE: 0,
        p.BINGET: 1, p.LONG_BINGET: 4,
    }  # fmt: skip
    counted = {
        p.SHORT_BINUNICODE: 1, p.BINUNICODE: 4, p.BINUNICODE8: 8, p.SHORT_BINBYTES: 1,
        p.BINBYTES: 4, p.BINBYTES8: 8, p.LONG1: 1, p.LONG4: 4,
    }  # fmt: skip
    table: list[tuple[int, int] | None] = [None] * 256
    for code, size in fixed.items():
        table[code[0]] = (size, 0)
    for code, size in counted.items():
        table[code[0]] = (0, size)
    return table


_OPCODES = _opcode_table()
_STOP = pickle.STOP[0]


def check_opcodes(data: bytes) -> None:
    """Raise :class:`pickle.UnpicklingError` unless ``data`` is made only of the opcodes
    plain data needs, each whole, up to a STOP."""
    i, end, table = 0, len(data), _OPCODES
    while i < end:
        op = data[i]
        spec = table[op]
        if spec is None:
            raise pickle.UnpicklingError(f"refused pickle opcode {bytes([op])!r} at byte {i}")
        if op == _STOP:
            return
        size, counted = spec
        i += 1
        if counted:
            i += counted + int.from_bytes(data[i : i + counted], "little")
        else:
            i += size
    raise pickle.UnpicklingError("pickle data truncated (no STOP)")


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")


def restricted_loads(data: bytes | str) -> Any:
    """Unpickle plain data only: containers, strings, bytes, numbers, None, booleans."""
    if isinstance(data, str):
        data = data.encode()
    check_opcodes(data)
    return _NoGlobals(io.BytesIO(data)).load()


def restricted_load(file: Any) -> Any:
    return restricted_loads(file.read())


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
