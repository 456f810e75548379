"""A merged file's records checked a stretch at a time: the scrubber's walk.

A merged file is a header, then ranges: a range record (which names the publisher
log the bytes come from and how many follow) and that many bytes of message records.
:class:`MergedWalk` checks every record's CRC and the ranges' framing, a bounded number
of bytes per :meth:`MergedWalk.advance`, keeping where it got to between calls, so a
check of a whole file can be spread between other work (the merger's appends) without
holding that work up for the time a whole file takes.

It only says whether the bytes walked so far check out. Where damage begins, and what
kind it is (a torn tail, corruption with valid records after it), is
:func:`rt_appliance.log.recovery.verify_file`'s job: the scrubber asks it whenever this
walk finds a problem or ends anywhere but on a whole range at the file's end. The walk
is cheaper than ``verify_file`` (one compiled walk per range and one read per stretch,
against a reader's machinery per range): 0.10-0.18 s against 0.6-1.1 s for a 2.8 MB
merged file on a busy 2-core machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.limits import MAX_FILE_HEADER_BYTES, MAX_PAYLOAD_BYTES
from rt_appliance.log.format import KIND_RANGE, RANGE_FIXED, RECORD_HEADER, decode_file_header
from rt_appliance.log.scan import check_record, check_records

__all__ = ["MergedWalk"]

_LENGTH_AT = 4  # a record header's length field


@dataclass(slots=True)
class MergedWalk:
    """Where the check of one merged file has got to."""

    path: Path
    offset: int = -1  # the next byte to check (a record boundary); -1: the header first
    range_left: int = 0  # bytes of message records left in the range being walked
    problem: str = ""  # why the bytes at ``offset`` do not check out ("" so far)
    at_end: bool = False  # the walk reached the file's end, as it stood then

    @property
    def done(self) -> bool:
        return bool(self.problem) or self.at_end

    def advance(self, budget: int) -> int:
        """Check up to about ``budget`` more bytes (a record larger than that whole);
        returns the bytes checked. Sets :attr:`problem` or :attr:`at_end` when the walk
        can go no further. A file gone meanwhile raises FileNotFoundError."""
        with open(self.path, "rb") as fh:
            fd = fh.fileno()
            if self.offset < 0:
                header = decode_file_header(os.pread(fd, MAX_FILE_HEADER_BYTES, 0))
                if isinstance(header, str):
                    self.problem = f"bad file header: {header}"
                    return 0
                self.offset = header.header_bytes
            size = os.fstat(fd).st_size
            if size < self.offset:
                self.problem = f"the file is {size} bytes, shorter than checked ({self.offset})"
                return 0
            start = self.offset
            want = max(budget, RECORD_HEADER.size)
            while self.offset - start < budget and not self.done:
                buf = os.pread(fd, min(want, size - self.offset), self.offset)
                before = self.offset
                self._check(buf)
                if self.problem or self.offset > before:
                    want = max(budget - (self.offset - start), RECORD_HEADER.size)
                    continue
                if self.offset + len(buf) >= size:  # the file ends here, or inside a record
                    self.at_end = True
                    break
                want = self._record_size(buf)  # a record larger than what was read
            return self.offset - start

    def _check(self, buf: bytes) -> None:
        """Check the whole records of ``buf`` (the file's bytes from :attr:`offset`)."""
        view, off, n = memoryview(buf), 0, len(buf)
        try:
            while off < n and not self.problem:
                if self.range_left == 0:
                    kind, end, problem = check_record(buf, off)
                    if problem == "incomplete":
                        break
                    if problem or kind != KIND_RANGE:
                        self.problem = problem or f"a record of kind {kind} where a range begins"
                        break
                    range_bytes = _range_bytes(buf, off + RECORD_HEADER.size, end)
                    if range_bytes is None:
                        self.problem = "a range record's names do not match their lengths"
                        break
                    self.range_left, off = range_bytes, end
                    continue
                limit = min(n, off + self.range_left)
                end, failed = check_records(view[:limit], off)
                self.range_left -= end - off
                if failed:
                    self.problem, off = "a record fails its check", end
                elif end == off and limit < n:
                    self.problem = "a range ends inside a record"
                elif end == off:
                    break  # the next record runs past what was read
                off = end
        finally:
            view.release()
            self.offset += off

    @staticmethod
    def _record_size(buf: bytes) -> int:
        """The whole size of the record ``buf`` begins with (capped at the largest)."""
        if len(buf) < RECORD_HEADER.size:
            return RECORD_HEADER.size
        length = int.from_bytes(buf[_LENGTH_AT : _LENGTH_AT + 4], "little")
        return RECORD_HEADER.size + min(length, MAX_PAYLOAD_BYTES)


def _range_bytes(buf: bytes, start: int, end: int) -> int | None:
    """The byte count of the range record whose payload is ``buf[start:end]`` (its CRC
    checked), or None if its fixed part and names do not add up to the payload. The
    names are not decoded: the walk needs the count only (``decode_range`` does both)."""
    if end - start < RANGE_FIXED.size:
        return None
    _, nbytes, _, tlen, hlen = RANGE_FIXED.unpack_from(buf, start)
    return int(nbytes) if end - start == RANGE_FIXED.size + tlen + hlen else None
