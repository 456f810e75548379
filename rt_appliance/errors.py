"""The one error tree of rt-appliance.

Every error a user can meet is an :class:`RTError`; foreign errors (``OSError``,
``ssl``, pydantic, pysyncobj) are mapped to it once, at the boundary where they
happen, with ``raise ... from exc`` so the cause stays visible in logs::

    RTError                         retryable?
    |-- LogError
    |   |-- CorruptLogError         no   bytes on disk fail their checks (names file, offset)
    |   |-- LogLockedError          yes  another writer holds the directory lock
    |   |-- LogFullError            yes  the disk budget (max_bytes) is used up
    |   |-- RecordTooLargeError     no   a payload that can never fit in a file (also UsageError)
    |   |-- DedupIdError            no   a .dedup topic message whose id breaks the rule
    |   `-- PositionError
    |       |-- InvalidPositionError no  not a position of this log
    |       `-- PositionPrunedError  no  the file holding it was deleted
    |-- TransportError              yes  a connection failed, closed or timed out
    |   |-- FrameError              no   the peer broke the protocol (bad or oversized frame)
    |   `-- PeerRejectedError       no   the peer's certificate or request is not allowed
    |-- CertificateError            no   a certificate or key unreadable, invalid or in the way
    `-- UsageError                  no   bad arguments to a call or command

``retryable`` tells a caller whether trying the same thing again later can work
without a human changing something. Invariant violations are not errors of this
tree: they are bugs, raised as :class:`rt_appliance.invariants.InvariantError`,
and are never caught.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CertificateError",
    "CorruptLogError",
    "DedupIdError",
    "FrameError",
    "InvalidPositionError",
    "LogError",
    "LogFullError",
    "LogLockedError",
    "PeerRejectedError",
    "PositionError",
    "PositionPrunedError",
    "RTError",
    "RecordTooLargeError",
    "SenderLockedError",
    "TransportError",
    "UsageError",
]


class RTError(Exception):
    """Base of every error rt-appliance raises on purpose."""

    retryable: ClassVar[bool] = False


class UsageError(RTError):
    """Bad arguments: a wrong option value, an unknown topic name, and so on."""


class CertificateError(RTError):
    """A TLS certificate or key that cannot be read, is not valid, or would be overwritten."""


class LogError(RTError):
    """Something about a stream file directory."""


class CorruptLogError(LogError):
    """Bytes on disk fail their checks somewhere other than a torn tail."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason

    def __reduce__(self) -> tuple[type[CorruptLogError], tuple[str, int, str]]:
        """Pickle with the three fields (errors cross process boundaries, e.g. in Spark)."""
        return (type(self), (self.path, self.offset, self.reason))


class LogLockedError(LogError):
    """Another writer already holds the directory."""

    retryable = True


class SenderLockedError(LogLockedError):
    """Another process already sends this publisher directory to the nodes (an
    ``rt push-client``, or an application's ``Publisher(..., replicate=...)``)."""

    retryable = True


class LogFullError(LogError):
    """The directory's disk budget (``max_bytes``) is used up."""

    retryable = True


class RecordTooLargeError(LogError, UsageError):
    """A payload too large to fit in one file, whatever happens later: refused before
    anything is written (also a :class:`UsageError`: the caller's argument is at fault)."""


class DedupIdError(LogError):
    """A message on a ``.dedup`` topic whose id does not follow the previous one."""


class PositionError(LogError):
    """A position that cannot be read from."""


class InvalidPositionError(PositionError):
    """The position does not name a record boundary of this log."""


class PositionPrunedError(PositionError):
    """The file holding the position has been deleted (pruned or dropped)."""


class TransportError(RTError):
    """A connection between hosts failed; reconnecting may work."""

    retryable = True


class FrameError(TransportError):
    """The peer sent something the protocol does not allow."""

    retryable = False


class PeerRejectedError(TransportError):
    """The peer is not allowed: unknown certificate name, wrong role, foreign directory."""

    retryable = False
