"""Harness: the raft decoder (``sequencer/raft/codec.py``) on any frame or journal bytes.

Input: a byte picking the entry point (``restricted_loads`` on a frame body, or
``restricted_load`` on a file, as pysyncobj reads its journal), then the pickle bytes.
Raft decodes frames only from peers that proved to be nodes, and treats any exception as
a garbage frame; what must never happen is a result holding anything but plain data (a
class, a function, any object a global would build), or an error that is not an
``Exception`` (which the transport's ``except Exception`` would not catch).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from fuzz.targets import Target
from fuzz.targets.draw import Draw
from rt_appliance.sequencer.raft.codec import dumps, restricted_load, restricted_loads

__all__ = ["PLAIN_TYPES", "TARGET", "check", "input_for"]

FRAME, FILE = 0, 1
# What the pickle opcodes build without a global (protocols 4 and 5; READONLY_BUFFER
# makes a memoryview of bytes or a bytearray).
PLAIN_TYPES = (
    memoryview,
    type(None),
    bool,
    int,
    float,
    str,
    bytes,
    bytearray,
    list,
    tuple,
    dict,
    set,
    frozenset,
)


def input_for(pickled: bytes, entry: int = FRAME) -> bytes:
    """The harness input that feeds ``pickled`` to ``entry`` (for seeds and tests)."""
    return bytes([entry]) + pickled


class _Global:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (print, ("a global was called",))


def seeds() -> list[bytes]:
    """Messages shaped like pysyncobj's, in both protocols a peer may send, and one
    pickle that asks for a global (the refusal path)."""
    append = {
        "type": "append_entries", "term": 3, "commit_index": 41, "prevLogIdx": 40,
        "prevLogTerm": 3, "entries": [(b"\x80\x04apply", 41, 3)], "lastCommitIndex": 40,
    }  # fmt: skip
    vote = {"type": "request_vote", "term": 4, "last_log_index": 41, "last_log_term": 3}
    values = [append, vote, {"type": "next_node_idx", "success": True, "term": 3}]
    out = [input_for(dumps(v)) for v in values]
    out += [input_for(pickle.dumps(v, protocol=5), FILE) for v in values]
    out.append(input_for(pickle.dumps({"type": "x", "f": _Global()}, protocol=4)))
    out.append(input_for(pickle.dumps(({1, 2}, frozenset([b"a"]), bytearray(b"b"), 1.5), 5)))
    return out


def _assert_plain(value: object) -> None:
    """Every object reachable from ``value`` is plain data (cycles and any depth allowed:
    a pickle can build both)."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        assert type(item) in PLAIN_TYPES, f"the decoder built a {type(item)!r}"
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            todo.extend(item)


def check(data: bytes) -> None:
    draw = Draw(data)
    entry = draw.byte() % 2
    pickled = draw.rest()
    try:
        value = (
            restricted_loads(pickled) if entry == FRAME else restricted_load(io.BytesIO(pickled))
        )
    except SystemError:  # an interpreter bug, not a refusal
        raise
    except Exception:
        return  # refused: the transport counts a garbage frame and closes
    _assert_plain(value)


TARGET = Target("raft", check, seeds)
