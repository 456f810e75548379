"""The publisher's disk budget (``max_bytes``) and what happens when it is used up.

The local disk is the publisher's buffer while the network is down. Rolled files
leave the directory when every RT node holds them (the push client deletes them)
or when ``drop_oldest`` drops them. When the next records would take the
directory past ``max_bytes``:

* ``block`` (default): wait, re-checking the disk with a capped backoff, until
  space is freed, or until ``block_timeout_s`` passes (then :class:`LogFullError`);
* ``error``: raise :class:`LogFullError` at once, nothing written;
* ``drop_oldest``: delete the oldest rolled files until the records fit, counting
  the files, records and bytes dropped. The file being written is never dropped.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rt_appliance.errors import LogFullError, UsageError
from rt_appliance.limits import BUDGET_MIN_ROLLS, BUDGET_POLL_MAX_S, BUDGET_POLL_MIN_S
from rt_appliance.log.recovery import verify_file
from rt_appliance.log.segments import StreamFile, fsync_dir, list_files, total_bytes

__all__ = ["DiskBudget", "Drops", "OnFull", "check_budget"]

log = logging.getLogger(__name__)


class OnFull(StrEnum):
    """What a publisher does when its disk budget is used up."""

    BLOCK = "block"
    ERROR = "error"
    DROP_OLDEST = "drop_oldest"


@dataclass(slots=True)
class Drops:
    """What ``drop_oldest`` has dropped since the publisher started."""

    files: int = 0
    records: int = 0
    bytes: int = 0


def check_budget(max_bytes: int, roll_bytes: int, block_timeout_s: float | None) -> None:
    """Raise :class:`UsageError` unless the budget options make sense together."""
    if max_bytes < BUDGET_MIN_ROLLS * roll_bytes:
        raise UsageError(
            f"max_bytes ({max_bytes}) must be at least twice roll_bytes ({roll_bytes}): "
            "the file being written and one rolled file must fit"
        )
    if block_timeout_s is not None and block_timeout_s < 0:
        raise UsageError(f"block_timeout_s must not be negative, got {block_timeout_s}")


class DiskBudget:
    """Keeps a directory's stream files within ``max_bytes``.

    ``admit`` is called with the bytes an append adds, new file headers
    included, so the files on disk never exceed ``max_bytes``.
    """

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        on_full: OnFull,
        roll_bytes: int,
        block_timeout_s: float | None,
    ) -> None:
        check_budget(max_bytes, roll_bytes, block_timeout_s)
        self.directory = directory
        self.max_bytes = max_bytes
        self.on_full = on_full
        self.block_timeout_s = block_timeout_s
        self.drops = Drops()
        self.used = total_bytes(list_files(directory))

    def admit(self, nbytes: int, current: StreamFile) -> None:
        """Return once ``nbytes`` more fit in the budget (or raise, per policy)."""
        if self.used + nbytes <= self.max_bytes:
            self.used += nbytes
            return
        self.used = total_bytes(list_files(self.directory))  # files may have been deleted
        if self.used + nbytes > self.max_bytes:
            if self.on_full is OnFull.ERROR:
                raise LogFullError(self._full_message(nbytes))
            if self.on_full is OnFull.DROP_OLDEST:
                self._drop_oldest(nbytes, current)
            else:
                self._wait(nbytes)
        self.used += nbytes

    def _full_message(self, nbytes: int) -> str:
        return (
            f"{self.directory}: disk budget full: {self.used} bytes used + {nbytes} "
            f"> max_bytes {self.max_bytes}"
        )

    def _wait(self, nbytes: int) -> None:
        deadline = None if self.block_timeout_s is None else time.monotonic() + self.block_timeout_s
        delay = BUDGET_POLL_MIN_S
        log.warning("%s: blocking until space is freed", self._full_message(nbytes))
        while self.used + nbytes > self.max_bytes:
            if deadline is not None and time.monotonic() >= deadline:
                raise LogFullError(self._full_message(nbytes) + f" for {self.block_timeout_s}s")
            time.sleep(delay)
            delay = min(delay * 2, BUDGET_POLL_MAX_S)
            self.used = total_bytes(list_files(self.directory))

    def _drop_oldest(self, nbytes: int, current: StreamFile) -> None:
        for old in list_files(self.directory):
            if self.used + nbytes <= self.max_bytes or old.key >= current.key:
                break
            try:  # the push client may delete replicated files at any time
                report = verify_file(old.path)
                os.unlink(old.path)
            except FileNotFoundError:
                self.used = total_bytes(list_files(self.directory))
                continue
            self.used -= report.size_bytes
            self.drops.files += 1
            self.drops.records += report.records
            self.drops.bytes += report.size_bytes
            log.warning(
                "%s: dropped %s (%d records, %d bytes) to stay within max_bytes",
                self.directory,
                old.path.name,
                report.records,
                report.size_bytes,
            )
        fsync_dir(self.directory)
        if self.used + nbytes > self.max_bytes:
            raise LogFullError(self._full_message(nbytes) + " after dropping every rolled file")
