"""The options of the ``rt`` data source, checked before any job starts (no pyspark here).

==========================  ==========================================================
option                      meaning
==========================  ==========================================================
path (``load(dir)``)        a stream file directory: a node's ``merged/``, a subscriber's
                            copy, a publisher's ``<topic>.<host>``
topics                      comma-separated topics to keep; default all
startingPosition            ``earliest`` (default), ``latest`` or a position
endingPosition              batch only: ``latest`` (default) or a position (exclusive)
maxRecordsPerTrigger        streaming: most records one micro-batch reads
maxBytesPerTrigger          streaming: most log bytes one micro-batch reads (``64MiB``)
codec                       ``raw`` (default), ``json`` or ``arrow``: how payloads decode
schema                      Spark DDL of the payload: needed by ``json``; ``arrow`` infers
holdFile                    streaming: file the committed position is written to, so the
                            archiver keeps what the query has not committed
splitBytes                  batch: a file is split into partitions of about this many bytes
==========================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rt_appliance.errors import InvalidPositionError, UsageError
from rt_appliance.limits import DEFAULT_SPLIT_BYTES
from rt_appliance.log.naming import validate_topic
from rt_appliance.position import Position
from rt_appliance.sizes import parse_size

__all__ = ["BASE_COLUMNS", "CODECS", "SourceOptions", "parse_options"]

CODECS = ("raw", "json", "arrow")
# Columns every row has, then the payload's: raw keeps ``payload``, json and arrow
# replace it with the decoded fields.
BASE_COLUMNS = ("position", "topic", "host", "timestamp", "id")
BASE_DDL = (
    "position BIGINT NOT NULL, topic STRING NOT NULL, host STRING NOT NULL, "
    "timestamp TIMESTAMP NOT NULL, id BIGINT NOT NULL"
)
RAW_DDL = BASE_DDL + ", payload BINARY NOT NULL"
_KNOWN = {
    "path",
    "topics",
    "startingposition",
    "endingposition",
    "maxrecordspertrigger",
    "maxbytespertrigger",
    "codec",
    "schema",
    "holdfile",
    "splitbytes",
}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    directory: Path
    topics: frozenset[str] | None
    starting: str | Position  # "earliest", "latest" or a position
    ending: str | Position  # "latest" or a position
    max_records: int | None
    max_bytes: int | None
    codec: str
    schema_ddl: str | None
    hold_file: Path | None
    split_bytes: int

    def keeps(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check every option; a :class:`UsageError` names the first bad one."""
    given = {k.lower(): v for k, v in options.items()}
    unknown = sorted(set(given) - _KNOWN)
    if unknown:
        raise UsageError(
            f"rt data source: unknown option {unknown[0]!r} "
            "(known: topics, startingPosition, endingPosition, maxRecordsPerTrigger, "
            "maxBytesPerTrigger, codec, schema, holdFile, splitBytes)"
        )
    path = given.get("path")
    if not path:
        raise UsageError("rt data source: no directory; use .load('/var/lib/rt/merged')")
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"rt data source: {directory} is not a directory (option path)")
    codec = given.get("codec", "raw").lower()
    if codec not in CODECS:
        raise UsageError(f"rt data source: option codec must be one of {CODECS}, got {codec!r}")
    schema_ddl = given.get("schema") or None
    if codec == "json" and schema_ddl is None:
        raise UsageError("rt data source: codec json needs option schema (a Spark DDL string)")
    hold = given.get("holdfile")
    return SourceOptions(
        directory=directory,
        topics=_topics(given.get("topics")),
        starting=_position("startingPosition", given.get("startingposition", "earliest")),
        ending=_position("endingPosition", given.get("endingposition", "latest"), earliest=False),
        max_records=_count("maxRecordsPerTrigger", given.get("maxrecordspertrigger")),
        max_bytes=_size("maxBytesPerTrigger", given.get("maxbytespertrigger")),
        codec=codec,
        schema_ddl=schema_ddl,
        hold_file=Path(hold) if hold else None,
        split_bytes=_size("splitBytes", given.get("splitbytes")) or DEFAULT_SPLIT_BYTES,
    )


def _topics(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    names = [t.strip() for t in value.split(",") if t.strip()]
    for name in names:
        try:
            validate_topic(name)
        except UsageError as exc:
            raise UsageError(f"rt data source: option topics: {exc}") from None
    return frozenset(names)


def _position(option: str, value: str, earliest: bool = True) -> str | Position:
    word = value.strip().lower()
    if word == "latest" or (earliest and word == "earliest"):
        return word
    try:
        return Position.parse(word)
    except InvalidPositionError:
        words = "earliest, latest" if earliest else "latest"
        raise UsageError(
            f"rt data source: option {option} must be {words} or a position, got {value!r}"
        ) from None


def _count(option: str, value: str | None) -> int | None:
    return _positive(option, value, int, "a positive integer")


def _size(option: str, value: str | None) -> int | None:
    return _positive(option, value, parse_size, "a size (4096, 64MiB)")


def _positive(option: str, value: str | None, parse: Callable[[str], int], what: str) -> int | None:
    """``value`` parsed, which must come out at least 1; None when the option is unset."""
    if value is None:
        return None
    try:
        number = parse(value)
    except (ValueError, UsageError):
        number = 0
    if number < 1:
        raise UsageError(f"rt data source: option {option} must be {what}: {value!r}")
    return number
