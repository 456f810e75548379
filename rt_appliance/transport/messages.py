"""The frames of the stream's protocol: replication (push, pull, fetch) and the sequencer's
control channel share one frame type space and one control codec (JSON objects).

Control frames carry a JSON object; DATA frames carry bytes::

    DATA body:
    0      2        2+n        10+n
    +------+--------+----------+------------------------+
    | n    | dir    | position |  whole records (and a  |
    | u16  | n B    | u64 LE   |  file header at offset 0)
    +------+--------+----------+------------------------+

    FETCHED body (the answer to one FETCH):
    0      2              2+n
    +------+--------------+------------------------------+
    | n    | head: JSON   |  raw bytes of the file from  |
    | u16  | n B          |  head.position on (maybe 0)  |
    +------+--------------+------------------------------+
    head = {dir, position, file_size, next_file, oldest, missing}

Conversation (client opens the TCP connection; ``->`` client to server):

* ``-> HELLO {role, host, stream, version, software}``,
  ``<- WELCOME {node, stream, version, software}`` (``version``: the wire protocol,
  ``software``: the release; see :mod:`rt_appliance.versions`)
* push: ``-> OFFER {dir}``, ``<- RESUME {dir, position}``, then ``-> DATA``
  frames from that position and ``<- ACK {dir, position}`` once durable;
* pull: ``-> PULL {position}``, then ``<- DATA`` frames and ``<- PRUNE {before}``
  when the node deleted files; the client needs no acks (it resumes by itself);
* ``-> METADATA {}``, ``<- TOPOLOGY {stream, nodes, leader}`` on any pull server;
* fetch (role ``fetch``, node to node, on the pull server): any number of
  ``-> FETCH {dir, position, max_bytes}``, each answered by one ``<- FETCHED``
  (see :mod:`rt_appliance.replicate.fetch`);
* ``ERROR {message, retryable}`` from either side before it closes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from rt_appliance.errors import FrameError
from rt_appliance.position import Position
from rt_appliance.versions import WIRE_PROTOCOL

__all__ = [
    "PROTOCOL_VERSION",
    "Data",
    "FrameType",
    "decode_control",
    "decode_data",
    "decode_fetched",
    "encode_control",
    "encode_data",
    "encode_fetched",
    "require",
]

PROTOCOL_VERSION = WIRE_PROTOCOL
_DIR_LEN = struct.Struct("<H")
_POSITION = struct.Struct("<Q")
_HEAD_LEN = struct.Struct("<H")


class FrameType(IntEnum):
    HELLO = 1
    WELCOME = 2
    OFFER = 3
    RESUME = 4
    DATA = 5
    ACK = 6
    ERROR = 7
    PULL = 8
    PRUNE = 9
    METADATA = 10
    TOPOLOGY = 11
    FETCH = 12  # node -> node: bytes of one file of in/<dir> or merged/ (repair, catch-up)
    FETCHED = 13  # the answer to FETCH: JSON head, then the bytes
    REPORT = 14  # sequencer -> leader: how far this node durably holds each input
    STATUS = 15  # anyone -> sequencer: what is your state
    STATE = 16  # the answer to STATUS or REPORT
    NOT_LEADER = 17  # an operation that needs the leader reached another node; names the leader


@dataclass(frozen=True, slots=True)
class Data:
    """Bytes of one directory starting at ``position``."""

    dir: str
    position: Position
    payload: memoryview


def encode_control(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def decode_control(frame_type: int, body: bytes) -> dict[str, Any]:
    try:
        fields = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # ValueError: not UTF-8, not JSON, or an integer of more than 4300 digits (Python's
        # limit on int("...")); RecursionError: arrays or objects nested too deep to parse.
        raise FrameError(f"{_name(frame_type)} frame is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise FrameError(f"{_name(frame_type)} frame is not a JSON object")
    return fields


def encode_data(dir: str, position: int, payload: bytes | memoryview) -> list[bytes | memoryview]:
    """DATA body pieces (the payload is not copied)."""
    name = dir.encode()
    return [_DIR_LEN.pack(len(name)) + name + _POSITION.pack(position), payload]


def decode_data(body: bytes) -> Data:
    if len(body) < _DIR_LEN.size:
        raise FrameError("DATA frame too short")
    (n,) = _DIR_LEN.unpack_from(body)
    start = _DIR_LEN.size + n + _POSITION.size
    if len(body) < start:
        raise FrameError("DATA frame too short for its directory name")
    try:
        name = body[_DIR_LEN.size : _DIR_LEN.size + n].decode()
    except UnicodeDecodeError:
        raise FrameError("DATA directory name is not UTF-8") from None
    (position,) = _POSITION.unpack_from(body, _DIR_LEN.size + n)
    return Data(name, Position(position), memoryview(body)[start:])


def encode_fetched(head: dict[str, Any], payload: bytes | memoryview) -> list[bytes | memoryview]:
    """FETCHED body pieces: the JSON ``head``, length-prefixed, then ``payload`` (not copied)."""
    encoded = encode_control(head)
    if len(encoded) > 0xFFFF:
        raise FrameError(f"FETCHED head of {len(encoded)} bytes is too long")
    return [_HEAD_LEN.pack(len(encoded)) + encoded, payload]


def decode_fetched(body: bytes) -> tuple[dict[str, Any], memoryview]:
    """The head (a JSON object) and the bytes of a FETCHED body."""
    if len(body) < _HEAD_LEN.size:
        raise FrameError("FETCHED frame too short")
    (n,) = _HEAD_LEN.unpack_from(body)
    start = _HEAD_LEN.size + n
    if len(body) < start:
        raise FrameError("FETCHED frame too short for its head")
    head = decode_control(FrameType.FETCHED, body[_HEAD_LEN.size : start])
    return head, memoryview(body)[start:]


def require(fields: dict[str, Any], key: str, kind: type) -> Any:
    """``fields[key]`` if it has type ``kind``, else a :class:`FrameError`."""
    value = fields.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise FrameError(f"frame field {key!r} missing or not {kind.__name__}: {value!r}")
    return value


def _name(frame_type: int) -> str:
    try:
        return FrameType(frame_type).name
    except ValueError:
        return f"type-{frame_type}"
