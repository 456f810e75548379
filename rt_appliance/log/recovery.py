"""Checking a directory's files and repairing a torn tail before a writer appends.

Decision table (also ``docs/RECOVERY.md``):

=============================================  ==========================  ==============
What the last file shows                        Writer start                Reader / verify
=============================================  ==========================  ==============
ends on a record boundary                      new session                 clean end
record runs past end of file                   truncate, report, new sess  end of valid log
bad record, nothing valid after it             truncate, report, new sess  end of valid log
bad record, a valid record right after it      refuse: CorruptLogError     CorruptLogError
header short or bad                            remove file, new session    CorruptLogError*
any damage in a file that is not the last one  (not scanned)               CorruptLogError
=============================================  ==========================  ==============

\\* a reader meets a bad header in the last file only while a writer is creating
it, or after a crash that writer recovery then removes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import CorruptLogError
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.reader import FileReader, TailState
from rt_appliance.log.segments import StreamFile, fsync_dir, list_files

_MAX_COUNTED_BYTES = 64 << 20  # cut bytes walked to count records; beyond, a lower bound

__all__ = ["FileReport", "TruncationReport", "recover_last_file", "verify_directory", "verify_file"]


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


def verify_file(path: Path) -> FileReport:
    """Scan every record of ``path``, checking each CRC; never raises for bad data."""
    size = path.stat().st_size
    try:
        with FileReader(path) as reader:
            count = 0
            while (block := reader.read_block(decode=False)) is not None:
                count += len(block.records.offsets)
            assert reader.tail is not None
            return FileReport(path, count, reader.tail.offset, size, reader.tail)
    except CorruptLogError as exc:
        return FileReport(path, 0, exc.offset, size, TailState(exc.offset, "corrupt", exc.reason), exc)


def verify_directory(directory: Path) -> list[FileReport]:
    """:func:`verify_file` for every stream file; damage before the last file is an error."""
    files = list_files(directory)
    reports = [verify_file(f.path) for f in files]
    for i, report in enumerate(reports[:-1]):
        if report.error is None and report.tail.kind != "clean":
            error = CorruptLogError(
                str(report.path), report.tail.offset, f"{report.tail.kind} tail in a file followed by later files"
            )
            reports[i] = FileReport(report.path, report.records, report.valid_bytes, report.size_bytes, report.tail, error)
    return reports


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
    if report.error is not None and report.error.offset == 0:  # bad header: holds nothing
        os.unlink(last.path)
        fsync_dir(directory)
        return TruncationReport(last.path, 0, report.size_bytes, 0, True, report.error.reason)
    if report.error is not None:
        raise report.error
    if report.tail.kind == "clean":
        return None
    with open(last.path, "r+b") as f:
        f.seek(report.valid_bytes)
        lost = _count_cut_records(f.read(_MAX_COUNTED_BYTES))
        f.truncate(report.valid_bytes)
        f.flush()
        os.fsync(f.fileno())
    return TruncationReport(
        last.path, report.valid_bytes, report.size_bytes - report.valid_bytes, lost, False,
        report.tail.reason or report.tail.kind,
    )
