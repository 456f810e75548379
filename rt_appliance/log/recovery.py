"""Checking a directory's files and repairing a torn tail before a writer appends.

Decision table (also ``docs/RECOVERY.md``):

=============================================  ==========================  ==============
What the last file shows                        Writer start                Reader / verify
=============================================  ==========================  ==============
ends on a record boundary                      new session                 clean end
record runs past end of file                   truncate, report, new sess  end of valid log
bad record, nothing valid after it             truncate, report, new sess  end of valid log
bad record, a valid record anywhere after it   refuse: CorruptLogError     CorruptLogError
header shorter than a header, or all zeros     remove file, new session    CorruptLogError*
header complete but bad                        refuse: CorruptLogError     CorruptLogError
any damage in a file that is not the last one  (not scanned)               CorruptLogError
leftover ``.log.X.Y.new`` (header being made)  removed                     ignored
=============================================  ==========================  ==============

\\* a writer creates a file under a hidden name and renames it once its header is
durable, so a short header means damage from outside or an older writer's crash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import CorruptLogError
from rt_appliance.limits import MAX_COUNTED_BYTES, TORN_HEADER_PROBE_BYTES
from rt_appliance.log.format import HEADER_FIXED, MAGIC, RECORD_HEADER
from rt_appliance.log.naming import parse_file_name
from rt_appliance.log.reader import FileReader, TailState
from rt_appliance.log.segments import StreamFile, fsync_dir, list_files, temporary_files

__all__ = [
    "FileReport",
    "TruncationReport",
    "recover_last_file",
    "remove_temporary_files",
    "verify_directory",
    "verify_file",
]


@dataclass(frozen=True, slots=True)
class FileReport:
    """What :func:`verify_file` found in one file."""

    path: Path
    records: int
    valid_bytes: int  # header and valid records: where the valid log of this file ends
    size_bytes: int
    tail: TailState
    error: CorruptLogError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.tail.kind == "clean"


@dataclass(frozen=True, slots=True)
class TruncationReport:
    """What a writer start removed from the end of the last file."""

    path: Path
    offset: int
    lost_bytes: int
    lost_records: int  # records whose bytes were cut (a partial record counts as one)
    removed_file: bool
    reason: str

    @property
    def removed_session(self) -> int:
        """The session of the removed file (never to be reused), or 0."""
        key = parse_file_name(self.path.name) if self.removed_file else None
        return key[0] if key is not None else 0


def verify_file(path: Path) -> FileReport:
    """Scan every record of ``path``, checking each CRC; never raises for bad data.

    ``records`` counts the valid records before the end of the valid data (or
    before the corruption, when there is some).
    """
    size = path.stat().st_size
    count = 0
    try:
        with FileReader(path, strict_tail=True) as reader:
            while (block := reader.read_block(decode=False)) is not None:
                count += len(block.records.offsets)
            tail = reader.tail
            if tail is None:  # read_block returned None, so it set the tail
                raise CorruptLogError(str(path), reader.offset, "reader stopped without a tail")
            return FileReport(path, count, tail.offset, size, tail)
    except CorruptLogError as exc:
        tail = TailState(exc.offset, "corrupt", exc.reason)
        return FileReport(path, count, exc.offset, size, tail, exc)


def verify_directory(directory: Path) -> list[FileReport]:
    """:func:`verify_file` for every stream file; damage before the last file is an error."""
    files = list_files(directory)
    reports = [verify_file(f.path) for f in files]
    for i, r in enumerate(reports[:-1]):
        if r.error is None and r.tail.kind != "clean":
            why = f"{r.tail.kind} tail ({r.tail.reason}) in a file followed by later files"
            error = CorruptLogError(str(r.path), r.tail.offset, why)
            reports[i] = FileReport(r.path, r.records, r.valid_bytes, r.size_bytes, r.tail, error)
    return reports


def remove_temporary_files(directory: Path) -> list[Path]:
    """Delete the ``.log.X.Y.new`` files a stopped writer left; they hold only a header."""
    removed = temporary_files(directory)
    for path in removed:
        path.unlink(missing_ok=True)
    if removed:
        fsync_dir(directory)
    return removed


def _is_torn_header(path: Path) -> bool:
    """Whether ``path`` is shorter than its own header, or only zeros: it holds nothing."""
    with open(path, "rb") as f:
        data = f.read(TORN_HEADER_PROBE_BYTES)
        rest_is_zero = not data.strip(b"\0") and not f.read(1)
    if rest_is_zero or len(data) < HEADER_FIXED.size:
        return True
    declared = HEADER_FIXED.unpack_from(data)[6]
    return data.startswith(MAGIC) and len(data) < declared


def _count_cut_records(data: bytes) -> int:
    """How many records the cut bytes held, walking their length fields."""
    offset, count = 0, 0
    while offset < len(data):
        count += 1
        if offset + RECORD_HEADER.size > len(data):
            break
        offset += RECORD_HEADER.size + RECORD_HEADER.unpack_from(data, offset)[1]
    return count


def recover_last_file(directory: Path) -> TruncationReport | None:
    """Make the last file of ``directory`` end on a valid record, before a writer starts.

    Returns what was cut, or None if nothing was. Raises :class:`CorruptLogError`
    when a bad record is followed by valid ones: appending after it would hide it.
    """
    files = list_files(directory)
    if not files:
        return None
    last: StreamFile = files[-1]
    report = verify_file(last.path)
    if report.error is not None and report.error.offset == 0 and _is_torn_header(last.path):
        os.unlink(last.path)
        fsync_dir(directory)
        return TruncationReport(last.path, 0, report.size_bytes, 0, True, report.error.reason)
    if report.error is not None:
        raise report.error
    if report.tail.kind == "clean":
        return None
    with open(last.path, "r+b") as f:
        f.seek(report.valid_bytes)
        lost = _count_cut_records(f.read(MAX_COUNTED_BYTES))
        f.truncate(report.valid_bytes)
        f.flush()
        os.fsync(f.fileno())
    lost_bytes = report.size_bytes - report.valid_bytes
    reason = report.tail.reason or report.tail.kind
    return TruncationReport(last.path, report.valid_bytes, lost_bytes, lost, False, reason)
