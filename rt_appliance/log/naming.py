"""Names on disk: stream files ``log.X.Y`` and publisher directories ``<topic>.<host>``.

The mapping between file names and positions lives here and nowhere else.

* ``log.X.Y``: X is the session (from 1, bumped at every writer start), Y the roll
  (from 0, bumped when a file reaches ``roll_bytes``), both decimal.
* A topic is letters, digits, ``_`` and ``-``, optionally ending in ``.dedup``
  (a deduplicated topic), at most 100 bytes.
* A host is a DNS-style name: letters, digits, ``-``, ``_`` and dots.
* A publisher directory is ``<topic>.<host>``, e.g. ``quotes.dedup.pub-1``; it is
  parsed back unambiguously because a topic has no dot but its ``.dedup`` suffix.
"""

from __future__ import annotations

import functools
import re

from rt_appliance.errors import UsageError
from rt_appliance.limits import MAX_HOST_BYTES, MAX_ROLL, MAX_SESSION, MAX_TOPIC_BYTES
from rt_appliance.position import Position

__all__ = [
    "DEDUP_SUFFIX",
    "file_name",
    "file_name_of",
    "is_dedup_topic",
    "parse_file_name",
    "parse_publisher_dir",
    "publisher_dir_name",
    "validate_host",
    "validate_topic",
]

DEDUP_SUFFIX = ".dedup"
_FILE_RE = re.compile(r"log\.(0|[1-9][0-9]{0,6})\.(0|[1-9][0-9]{0,4})")
_TOPIC_RE = re.compile(r"[A-Za-z0-9_-]+(\.dedup)?")
_HOST_RE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def file_name(session: int, roll: int) -> str:
    """``log.<session>.<roll>``."""
    return f"log.{session}.{roll}"


def parse_file_name(name: str) -> tuple[int, int] | None:
    """``(session, roll)`` of a stream file name, or None for any other name."""
    match = _FILE_RE.fullmatch(name)
    if match is None:
        return None
    session, roll = int(match.group(1)), int(match.group(2))
    if not (1 <= session <= MAX_SESSION and roll <= MAX_ROLL):
        return None
    return session, roll


def file_name_of(position: Position) -> str:
    """The file a position points into."""
    return file_name(position.session, position.roll)


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is a valid topic name, else raise :class:`UsageError`."""
    if not _TOPIC_RE.fullmatch(topic) or len(topic.encode()) > MAX_TOPIC_BYTES:
        raise UsageError(
            f"invalid topic {topic!r}: use letters, digits, '_' and '-' "
            f"(at most {MAX_TOPIC_BYTES} bytes), optionally ending in '{DEDUP_SUFFIX}'"
        )
    return topic


def validate_host(host: str) -> str:
    """Return ``host`` if it is a valid host name, else raise :class:`UsageError`."""
    if (
        not _HOST_RE.fullmatch(host)
        or len(host.encode()) > MAX_HOST_BYTES
        or host.startswith(DEDUP_SUFFIX[1:] + ".")
    ):
        raise UsageError(
            f"invalid host {host!r}: use letters, digits, '-', '_' and dots "
            f"(at most {MAX_HOST_BYTES} bytes; a first label 'dedup' would be ambiguous)"
        )
    return host


def is_dedup_topic(topic: str) -> bool:
    return topic.endswith(DEDUP_SUFFIX)


def publisher_dir_name(topic: str, host: str) -> str:
    """``<topic>.<host>``, the directory a publisher writes and nodes replicate."""
    return f"{validate_topic(topic)}.{validate_host(host)}"


@functools.lru_cache(maxsize=4096)  # names repeat: every merge instruction carries one
def parse_publisher_dir(name: str) -> tuple[str, str] | None:
    """``(topic, host)`` from a publisher directory name, or None if it is not one."""
    topic, dot, rest = name.partition(".")
    if rest.startswith(DEDUP_SUFFIX[1:] + "."):
        topic, rest = topic + DEDUP_SUFFIX, rest[len(DEDUP_SUFFIX) :]
    if not dot or not rest:
        return None
    try:
        return validate_topic(topic), validate_host(rest)
    except UsageError:
        return None
