"""Harness: the record walk, compiled (``log/_walk.c``) and in Python (``log/scan.py``).

``scan`` uses the compiled walk when the package was built with it and the Python walk
otherwise, so the two must agree on every input: the same records, timestamps and ids,
the same end, the same verdict on the record they stopped at. ``make fuzz`` loads the
compiled walk built with AddressSanitizer and libFuzzer's coverage (:mod:`fuzz.asan`),
so a read outside the buffer is a crash and the fuzzer steers by the C code's branches.

Input: four parameter bytes, then the bytes of a log:

* byte 0, flags: bit 0 uses the real payload limit (else byte 3 is the limit); bit 1
  rewrites the CRCs of the records the walk would visit, so the fuzzer (which cannot
  forge a CRC-32) also reaches valid records, range records and what follows them;
  bit 2 also writes the bytes after a file header and reads them with ``FileReader``
  and ``verify_file``; bit 3 makes that file a merged log; bit 4 reads it with
  ``strict_tail``; bits 5-6 pick how blocks are read (decoded, offsets only, unchecked,
  or as columns);
* byte 1, where the walk starts; byte 2, the record limit; byte 3, a small payload limit.
"""

from __future__ import annotations

import array
import ctypes
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from fuzz.targets import Target
from fuzz.targets.draw import Draw
from fuzz.targets.memfile import MemFile
from rt_appliance.errors import CorruptLogError
from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log import scan as scan_module
from rt_appliance.log.format import (
    FILE_KIND_MERGED,
    FILE_KIND_PUBLISHER,
    RECORD_HEADER,
    RangeHeader,
    encode_batch,
    encode_file_header,
    encode_range,
)
from rt_appliance.log.reader import FileReader
from rt_appliance.log.recovery import verify_file
from rt_appliance.log.scan import Scan, _walk_python, scan, scan_columns

__all__ = [
    "FILE",
    "FIX_CRC",
    "MERGED",
    "REAL_LIMIT",
    "STRICT",
    "TARGET",
    "check",
    "input_for",
    "native",
]

REAL_LIMIT, FIX_CRC, FILE, MERGED, STRICT = 1, 2, 4, 8, 16
_READ_MODES = ("decoded", "offsets", "unchecked", "columns")
LIMITS = (1 << 30, 0, 1, 3, 64, 65536)
_HEAD = RECORD_HEADER.size


def native() -> ModuleType | None:
    """The compiled walk ``scan`` uses (None: built without it)."""
    return scan_module._native


def input_for(log: bytes, flags: int = REAL_LIMIT, start: int = 0, limit_index: int = 0) -> bytes:
    """The harness input that walks ``log`` (for seeds and tests)."""
    return bytes([flags, start, limit_index, 0]) + log


def seeds() -> list[bytes]:
    records, _ = encode_batch([b"a", b"", b"payload " * 20], 1_700_000_000, [1, 2, 3])
    many, _ = encode_batch([b""] * 70, 5, None)  # past the Python walk's numpy threshold
    rng = encode_range(RangeHeader("trades", "pub-1", 0, len(records), 3), 9, 10)
    torn = records[:-5]
    bad = bytearray(records)
    bad[40] ^= 1
    as_file = REAL_LIMIT | FILE
    return [
        input_for(records),
        input_for(b"\0" * 3 + records, start=3, limit_index=3),
        input_for(many),
        input_for(torn + b"\0" * 100, as_file),
        input_for(bytes(bad) + records, as_file | STRICT),
        input_for(rng + records + rng + many, as_file | MERGED | FIX_CRC),
        input_for(records, as_file | (3 << 5)),  # read as columns
    ]


def _fix_crcs(buf: bytes, start: int) -> bytes:
    """``buf`` with the CRC of every whole record on the walk from ``start`` made right."""
    out = bytearray(buf)
    off = start
    while off + _HEAD <= len(out):
        end = off + _HEAD + int.from_bytes(out[off + 4 : off + 8], "little")
        if end > len(out):
            break
        out[off : off + 4] = zlib.crc32(out[off + 4 : end]).to_bytes(4, "little")
        off = end
    return bytes(out)


def _exact(buf: bytes) -> ctypes.Array[ctypes.c_char]:
    """A copy of ``buf`` in a block of exactly its size. Under ``PYTHONMALLOC=malloc``
    ASan's redzone starts right after it; a bytes object is followed by a NUL byte of its
    own, which would hide a read one byte too far."""
    return (ctypes.c_char * len(buf)).from_buffer_copy(buf)


@contextmanager
def _python_walk() -> Iterator[None]:
    """Make ``scan`` and ``scan_columns`` use the Python walk, as in a build without C."""
    saved = scan_module._native
    scan_module._native = None
    try:
        yield
    finally:
        scan_module._native = saved


def _check_raw(walk: ModuleType, buf: bytes, start: int, limit: int, max_payload: int) -> None:
    """``walk.walk`` and ``walk.columns`` against the Python walk, argument for argument."""
    exact = _exact(buf)
    for verify in (True, False):
        for decode in (True, False):
            args = (start, limit, verify, decode, max_payload)
            found = walk.walk(exact, *args)
            expected = _walk_python(buf, *args)
            assert found == expected, f"walk{args}: compiled {found} != Python {expected}"
    offsets, stamps, ids, end, failed = _walk_python(buf, start, limit, True, True, max_payload)
    assert stamps is not None and ids is not None
    ends = [*offsets[1:], end] if offsets else []
    payloads = [buf[o + _HEAD : e] for o, e in zip(offsets, ends, strict=True)]
    starts = [0]
    for p in payloads:
        starts.append(starts[-1] + len(p))
    expected_columns = (len(offsets), offsets, stamps, ids, starts, b"".join(payloads), end, failed)
    count, o, t, d, v, data, c_end, c_failed = walk.columns(exact, start, limit, max_payload)
    found_columns = (
        count,
        array.array("q", o).tolist(),
        array.array("q", t).tolist(),
        array.array("q", d).tolist(),
        array.array("i", v).tolist(),
        data,
        c_end,
        c_failed,
    )
    assert found_columns == expected_columns, f"columns: {found_columns} != {expected_columns}"


def _summary(records: Scan) -> tuple[object, ...]:
    """A scan's whole content as plain values (its columns, if any, as lists)."""
    where = (records.start, records.stop, records.stop_offset, records.reason)
    if records.columns is not None:
        c = records.columns
        lists = [a.tolist() for a in (c.offsets, c.timestamps_ns, c.ids, c.value_offsets)]
        return (*where, *lists, bytes(c.data))
    payloads = [bytes(p) for p in records.payloads]
    return (*where, records.offsets, records.timestamps_ns, records.ids, payloads)


def _scans(buf: bytes, start: int, limit: int) -> list[tuple[object, ...]]:
    out = [_summary(scan_columns(buf, start, limit))]
    for decode, verify in ((True, True), (False, True), (True, False)):
        out.append(_summary(scan(buf, start, limit, decode, verify)))
    return out


_FILE = MemFile("rt-fuzz-walk")


def _read_file(path: Path, flags: int, limit: int) -> list[tuple[object, ...]]:
    """Every block a reader takes from ``path``, then its tail or the corruption it
    raised; and what ``verify_file`` says."""
    mode = _READ_MODES[(flags >> 5) & 3]
    decode, verify = mode in ("decoded", "columns"), mode != "unchecked"
    out: list[tuple[object, ...]] = []
    try:
        with FileReader(path, strict_tail=bool(flags & STRICT)) as reader:
            for _ in range(10_000):
                block = reader.read_block(max(limit, 1), decode, verify, mode == "columns")
                if block is None:
                    out.append(("tail", reader.tail))
                    break
                out.append((block.topic, block.host, *_summary(block.records)))
            else:
                raise AssertionError("the reader does not reach the end of a small file")
    except CorruptLogError as exc:
        out.append(("corrupt", exc.offset, exc.reason))
    report = verify_file(path)
    error = None if report.error is None else (report.error.offset, report.error.reason)
    out.append(("verify", report.records, report.valid_bytes, report.tail, error))
    return out


def check(data: bytes) -> None:
    draw = Draw(data)
    flags = draw.byte()
    buf_start, limit, small_limit = draw.byte(), draw.choice(LIMITS), draw.byte()
    buf = draw.rest()
    start = min(buf_start, len(buf) + 2)
    max_payload = MAX_PAYLOAD_BYTES if flags & REAL_LIMIT else small_limit
    if flags & FIX_CRC:
        buf = _fix_crcs(buf, start)
    walk = native()
    if walk is not None:
        _check_raw(walk, buf, start, limit, max_payload)
    found = _scans(buf, start, limit)
    with _python_walk():
        expected = _scans(buf, start, limit)
    assert found == expected, f"scan: compiled {found} != Python {expected}"
    if flags & FILE:
        kind = FILE_KIND_MERGED if flags & MERGED else FILE_KIND_PUBLISHER
        path = _FILE.holding(encode_file_header(kind, 1, 0, 0, "trades", "pub-1") + buf)
        found = _read_file(path, flags, limit)
        with _python_walk():
            expected = _read_file(path, flags, limit)
        assert found == expected, f"file: compiled {found} != Python {expected}"


TARGET = Target("walk", check, seeds, native=True)
