"""The replicated state of a stream and the instructions raft commits to change it.

Raft carries two kinds of instruction, JSON-encoded, never payloads:

* ``merge``: append one merged-log record at ``position``: a range record naming
  input ``dir`` and ``start``, followed by the input's records from ``start`` to
  ``end`` (for a ``.dedup`` topic, only those whose id is above the topic's
  watermark). ``nbytes`` and ``crc`` (zlib CRC-32 of the whole merged record) let
  every node check that what it built is what the leader built.
* ``skip``: advance input ``dir`` from ``start`` to ``end`` without a merged record:
  every record in that range is a ``.dedup`` message already merged.
* ``prune``: the archiver's decision that merged files with a roll below ``below``
  are deleted.
* ``lease``: lease ``name`` (one job for the whole stream, such as the Spark
  pipeline that fails over) granted to node ``holder`` until ``until``, by the
  leader's clock at ``ts``. It is refused while another node's lease has not
  expired at ``ts``; its holder renews it, and gives it up with ``until == ts``.

:meth:`SequencerState.apply` is deterministic: given the same sequence of commands
every node reaches the same state, and a command that does not fit the state
exactly (wrong sequence number, a position that does not continue the log, a
malformed field) is rejected, identically everywhere, without raising.

The running ``digest`` chains every merged record's (seq, position, size, crc)
through SHA-256, so equal digests at equal sequence numbers mean equal logs.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from rt_appliance.limits import MAX_FILE_BYTES
from rt_appliance.log.format import FILE_KIND_MERGED, encode_file_header
from rt_appliance.log.naming import is_dedup_topic, parse_publisher_dir
from rt_appliance.position import Position

__all__ = [
    "MERGED_SESSION",
    "Instruction",
    "Lease",
    "Merge",
    "Prune",
    "SequencerState",
    "Skip",
    "chain_digest",
    "decode_instruction",
    "merged_header",
    "topic_of",
]

# the basis of an instruction written before instructions carried one: applied as it was
# then (a node replaying its journal after an upgrade must decide as it decided before)
_LEGACY = -(1 << 63) - 1
MERGED_SESSION = 1  # the merged log is one session; its files are log.1.0, log.1.1, ...
MERGED_HOST = "merged"
ZERO_DIGEST = "0" * 64
_LINK = struct.Struct("<QQQI")


def merged_header(stream: str, roll: int, created_ns: int) -> bytes:
    """The header of merged file ``roll`` (its size depends on the stream name only)."""
    return encode_file_header(
        FILE_KIND_MERGED, MERGED_SESSION, roll, created_ns, stream, MERGED_HOST
    )


@functools.lru_cache(maxsize=64)
def _header_bytes(stream: str) -> int:
    return len(merged_header(stream, 0, 0))


def chain_digest(digest: str, seq: int, position: int, nbytes: int, crc: int) -> str:
    """The digest after appending one merged record to a log whose digest is ``digest``."""
    return hashlib.sha256(
        bytes.fromhex(digest) + _LINK.pack(seq, position, nbytes, crc)
    ).hexdigest()


@functools.lru_cache(maxsize=4096)  # a stream has few inputs; every apply asks
def topic_of(dir_name: str) -> str:
    parsed = parse_publisher_dir(dir_name)
    return parsed[0] if parsed else dir_name


@dataclass(frozen=True, slots=True)
class Merge:
    seq: int
    position: int  # where the merged record starts
    dir: str  # input directory, <topic>.<host>
    start: int  # input position of the first record covered
    end: int  # input position after the last record covered
    count: int  # records kept (after dedup)
    nbytes: int  # size of the merged record: range record + kept records
    crc: int  # zlib CRC-32 of those bytes
    ts: int  # the leader's clock when proposing; stamps the range record and new files
    watermark: int | None  # dedup topics: the highest id merged after this one
    basis: int | None = None  # dedup topics: the watermark the leader filtered against
    # the input bytes [start, end) themselves, carried in the raft entry (a range the
    # leader planned before a majority reported holding it; see the planner); None: every
    # node reads them from its own copy of the input or a peer's
    data: bytes | None = None

    def encode(self) -> bytes:
        fields = _fields(self)
        data = fields.pop("data")
        if data is not None:  # absent otherwise: what releases before carried input wrote
            fields["data"] = base64.b64encode(data).decode()
        return json.dumps({"t": "merge", **fields}, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Skip:
    dir: str
    start: int
    end: int
    ts: int
    basis: int | None = None  # the watermark every skipped id is at or below

    def encode(self) -> bytes:
        return json.dumps({"t": "skip", **_fields(self)}, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Prune:
    below: int  # merged rolls below this are deleted
    reason: str
    ts: int

    def encode(self) -> bytes:
        return json.dumps({"t": "prune", **_fields(self)}, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Lease:
    name: str  # what is leased, e.g. "spark-pipeline"
    holder: str  # the node it is granted to
    ts: int  # the leader's clock when proposing (ns): expiry is judged at this time
    until: int  # when it expires, by the same clock; == ts gives it up

    def encode(self) -> bytes:
        return json.dumps({"t": "lease", **_fields(self)}, separators=(",", ":")).encode()


Instruction = Merge | Skip | Prune | Lease


def _fields(obj: Instruction) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


def decode_instruction(command: bytes) -> Instruction | str:
    """The instruction in ``command``, or why it is not a valid one."""
    try:
        doc = json.loads(command)
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(doc, dict):
        return "not a JSON object"
    kind = doc.pop("t", None)
    cls: type[Merge] | type[Skip] | type[Prune] | type[Lease]
    ints: tuple[str, ...]
    strs: tuple[str, ...]
    if kind == "merge":
        cls, ints, strs = Merge, Merge.__slots__, ("dir",)
    elif kind == "skip":
        cls, ints, strs = Skip, Skip.__slots__, ("dir",)
    elif kind == "prune":
        cls, ints, strs = Prune, Prune.__slots__, ("reason",)
    elif kind == "lease":
        cls, ints, strs = Lease, Lease.__slots__, ("name", "holder")
    else:
        return f"unknown instruction {kind!r}"
    if "basis" in cls.__slots__:
        doc.setdefault("basis", _LEGACY)  # written before instructions carried it
    data: bytes | None = None
    if "data" in cls.__slots__:
        carried = doc.pop("data", None)
        if carried is not None:
            try:
                data = base64.b64decode(carried, validate=True)
            except (TypeError, ValueError) as exc:
                return f"{kind}.data is not base64: {exc}"
        doc["data"] = None
    if set(doc) != set(cls.__slots__):
        return f"{kind} fields {sorted(doc)} != {sorted(cls.__slots__)}"
    for name in ints:
        value = doc[name]
        if name == "data":
            continue
        if name in strs:
            if not isinstance(value, str):
                return f"{kind}.{name} is not a string"
        elif (value is None and name in ("watermark", "basis")) or (
            name == "basis" and value == _LEGACY
        ):
            continue
        elif not isinstance(value, int) or isinstance(value, bool) or value < -(1 << 63):
            return f"{kind}.{name} is not an integer"
    if data is not None:
        doc["data"] = data
    return cls(**doc)


@dataclass
class SequencerState:
    """What every node agrees on. Only :meth:`apply` changes it."""

    stream: str
    roll_bytes: int
    seq: int = 0  # merge instructions applied = merged records written
    end: int = 0  # where the next merged record goes; 0 before the first
    digest: str = ZERO_DIGEST
    inputs: dict[str, int] = field(default_factory=dict)  # dir -> next input position
    watermarks: dict[str, int] = field(default_factory=dict)  # dedup topic -> highest id
    pruned_below: int = 0  # merged rolls below this were pruned
    prunes: int = 0
    rejected: int = 0
    last_reject: str = ""
    # lease name -> {"holder", "until", "since": when this holder took it, "grants"}
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def header_bytes(self) -> int:
        return _header_bytes(self.stream)

    def next_position(self, nbytes: int) -> int:
        """Where a merged record of ``nbytes`` goes: after the log's end, or in a new file."""
        if self.end == 0:
            return int(Position.of(MERGED_SESSION, 0, self.header_bytes))
        end = Position(self.end)
        if end.offset + nbytes >= self.roll_bytes and end.offset > self.header_bytes:
            return int(Position.of(MERGED_SESSION, end.roll + 1, self.header_bytes))
        return self.end

    def watermark_of(self, dir_name: str) -> int | None:
        topic = topic_of(dir_name)
        if not is_dedup_topic(topic):
            return None
        return self.watermarks.get(topic, -(1 << 63))

    def apply(self, command: bytes) -> Instruction | None:
        """Apply one committed command; returns it, or None if it was rejected."""
        return self.apply_decoded(decode_instruction(command))

    def apply_decoded(self, instruction: Instruction | str) -> Instruction | None:
        """:meth:`apply` of a command :func:`decode_instruction` has decoded already."""
        problem = instruction if isinstance(instruction, str) else self._check(instruction)
        if problem:
            self.rejected += 1
            self.last_reject = problem
            return None
        assert not isinstance(instruction, str)
        if isinstance(instruction, Merge):
            self.seq = instruction.seq
            self.end = instruction.position + instruction.nbytes
            self.digest = chain_digest(
                self.digest,
                instruction.seq,
                instruction.position,
                instruction.nbytes,
                instruction.crc,
            )
            self.inputs[instruction.dir] = instruction.end
            if instruction.watermark is not None:
                self.watermarks[topic_of(instruction.dir)] = instruction.watermark
        elif isinstance(instruction, Skip):
            self.inputs[instruction.dir] = instruction.end
        elif isinstance(instruction, Lease):
            self._grant(instruction)
        else:
            self.pruned_below = instruction.below
            self.prunes += 1
        return instruction

    def lease_holder(self, name: str, now_ns: int) -> str | None:
        """The node holding lease ``name`` at ``now_ns`` (the leader's clock), or None."""
        lease = self.leases.get(name)
        return lease["holder"] if lease is not None and lease["until"] > now_ns else None

    def _grant(self, ins: Lease) -> None:
        before = self.leases.get(ins.name)
        renewed = before is not None and before["holder"] == ins.holder and before["until"] > ins.ts
        self.leases[ins.name] = {
            "holder": ins.holder,
            "until": ins.until,
            "since": before["since"] if renewed and before is not None else ins.ts,
            "grants": (before["grants"] if before is not None else 0) + (0 if renewed else 1),
        }

    def _check_lease(self, ins: Lease) -> str:
        if not ins.name or not ins.holder or len(ins.name) > 64 or len(ins.holder) > 64:
            return "lease: name and holder must be 1 to 64 characters"
        if ins.until < ins.ts:
            return f"lease {ins.name}: until {ins.until} before ts {ins.ts}"
        holder = self.lease_holder(ins.name, ins.ts)
        if holder is not None and holder != ins.holder:
            until = self.leases[ins.name]["until"]
            return f"lease {ins.name} is {holder}'s until {until}, not {ins.holder}'s at {ins.ts}"
        return ""

    def _check(self, ins: Instruction) -> str:
        if isinstance(ins, Lease):
            return self._check_lease(ins)
        if isinstance(ins, Skip):
            if not is_dedup_topic(topic_of(ins.dir)):
                return f"skip of {ins.dir}: only .dedup inputs hold records to skip"
            return self._check_range(ins.dir, ins.start, ins.end) or self._check_basis(ins)
        if isinstance(ins, Prune):
            newest = Position(self.end).roll if self.end else 0
            if not self.pruned_below < ins.below <= newest:
                return f"prune below {ins.below}: outside ({self.pruned_below}, {newest}]"
            return ""
        if ins.seq != self.seq + 1:
            return f"merge seq {ins.seq}, expected {self.seq + 1}"
        if ins.position != self.next_position(ins.nbytes):
            return f"merge at {ins.position}, expected {self.next_position(ins.nbytes)}"
        problem = self._check_range(ins.dir, ins.start, ins.end)
        if problem:
            return problem
        if ins.count < 1 or ins.nbytes <= 0:
            return "merge of no records (a fully deduplicated range is a skip)"
        if ins.data is not None and len(ins.data) != ins.end - ins.start:  # one file's range
            return f"merge of {ins.dir} carries {len(ins.data)} bytes for {ins.end - ins.start}"
        if ins.nbytes > MAX_FILE_BYTES - self.header_bytes:  # a file may hold one larger record
            return f"merge record of {ins.nbytes} bytes cannot fit a file of {MAX_FILE_BYTES}"
        is_dedup = is_dedup_topic(topic_of(ins.dir))
        if is_dedup != (ins.watermark is not None):
            return "watermark given for a topic that is not .dedup, or missing for one"
        return self._check_basis(ins)

    def _check_basis(self, ins: Merge | Skip) -> str:
        """A leader filters a ``.dedup`` range against the watermark of the state it plans
        on, which may hold proposals not committed yet. If one of them is rejected, what
        it filtered out (or skipped) was decided against a watermark that never was:
        applying it would drop ids nobody merged. So an instruction applies only on the
        watermark it was planned against."""
        if ins.basis == _LEGACY:
            return ""
        expected = self.watermark_of(ins.dir)
        if ins.basis != expected:
            return f"{ins.dir} filtered against watermark {ins.basis}, the topic's is {expected}"
        return ""

    def _check_range(self, dir_name: str, start: int, end: int) -> str:
        if parse_publisher_dir(dir_name) is None:
            return f"invalid input {dir_name!r}"
        known = self.inputs.get(dir_name)
        if known is not None and start < known:
            return f"{dir_name} from {Position(start)}, already merged to {Position(known)}"
        if (
            known is not None
            and start != known
            and Position(start).file_key == Position(known).file_key
        ):
            return f"{dir_name} from {Position(start)} leaves a gap after {Position(known)}"
        first, last = Position(start), Position(end)
        if last.file_key != first.file_key or last <= first:
            return f"{dir_name} range {first}..{last} crosses a file or is empty"
        return ""

    # snapshots
    def to_json(self) -> dict[str, Any]:
        # leases only when there are any: a release from before them restores the rest
        leases = {"leases": self.leases} if self.leases else {}
        return copy.deepcopy(
            {
                **leases,
                "stream": self.stream,
                "roll_bytes": self.roll_bytes,
                "seq": self.seq,
                "end": self.end,
                "digest": self.digest,
                "inputs": self.inputs,
                "watermarks": self.watermarks,
                "pruned_below": self.pruned_below,
                "prunes": self.prunes,
                "rejected": self.rejected,
                "last_reject": self.last_reject,
            }
        )

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SequencerState:
        return cls(**copy.deepcopy(doc))

    def copy(self) -> SequencerState:
        return SequencerState.from_json(self.to_json())
