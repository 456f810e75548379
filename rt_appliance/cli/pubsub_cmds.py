"""``rt publish`` and ``rt subscribe``: the library's Publisher and Subscriber on stdin/stdout."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
from collections.abc import Iterator

import click

from rt_appliance.cli.options import SIZE
from rt_appliance.errors import UsageError
from rt_appliance.limits import (
    DEFAULT_FSYNC_INTERVAL_MS,
    DEFAULT_ROLL_BYTES,
    MAX_FSYNC_INTERVAL_MS,
    STDIN_READ_BYTES,
)
from rt_appliance.log.naming import is_dedup_topic
from rt_appliance.position import Position
from rt_appliance.publish import Durability, OnFull, Publisher
from rt_appliance.subscribe import Message, Subscriber


@click.command()
@click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False),
    help="Publisher root; messages go to DIR/<topic>.<host>/log.X.Y.",
)
@click.option(
    "--topic",
    required=True,
    help="Topic name: letters, digits, '_' and '-'; end it in '.dedup' for a deduplicated topic.",
)
@click.option(
    "--host", default=None, help="Host name in the directory name  [default: this machine's]"
)
@click.option(
    "--fsync",
    type=click.Choice([d.value for d in Durability]),
    default="batch",
    show_default=True,
    help="always or batch: the lines of each read from stdin are durable before the next "
    "read; interval: synced every --fsync-interval-ms; never: synced only at the end.",
)
@click.option(
    "--fsync-interval-ms",
    type=click.IntRange(1, MAX_FSYNC_INTERVAL_MS),
    default=DEFAULT_FSYNC_INTERVAL_MS,
    show_default=True,
    help="Sync period for --fsync interval.",
)
@click.option(
    "--roll-bytes",
    type=SIZE,
    default=DEFAULT_ROLL_BYTES,
    show_default="1GiB",
    help="Start a new file (roll) before a file reaches this size; at most 1GiB.",
)
@click.option(
    "--max-bytes",
    type=SIZE,
    default=None,
    help="Disk budget for the directory (at least twice --roll-bytes)  [default: none]",
)
@click.option(
    "--on-full",
    type=click.Choice([p.value for p in OnFull]),
    default="block",
    show_default=True,
    help="When --max-bytes is reached: wait for space, fail, or drop the oldest rolled files.",
)
@click.option(
    "--first-id",
    type=int,
    default=None,
    help="Give messages ids FIRST, FIRST+1, ... (required for a .dedup topic).",
)
def publish(
    directory: str,
    topic: str,
    host: str | None,
    fsync: str,
    fsync_interval_ms: int,
    roll_bytes: int,
    max_bytes: int | None,
    on_full: str,
    first_id: int | None,
) -> None:
    """Publish each line of standard input as one message (newline removed).

    Lines are published as soon as they arrive, in batches of whatever is
    available. At the end it prints how many messages it published and the
    position after the last one.
    """
    if is_dedup_topic(topic) and first_id is None:
        raise UsageError(
            f"topic {topic} is a .dedup topic: give --first-id (the id of the first line)"
        )
    next_id = first_id
    count = 0
    with Publisher(
        directory,
        topic,
        host,
        fsync=fsync,
        fsync_interval_ms=fsync_interval_ms,
        roll_bytes=roll_bytes,
        max_bytes=max_bytes,
        on_full=on_full,
    ) as publisher:
        for lines in _stdin_lines():
            ids = None
            if next_id is not None:
                ids = list(range(next_id, next_id + len(lines)))
                next_id += len(lines)
            publisher.publish_batch(lines, ids=ids)
            count += len(lines)
        end = publisher.flush()
    click.echo(
        f"published {count} messages to {publisher.directory}; next position {end.format()}",
        err=True,
    )


def _stdin_lines() -> Iterator[list[bytes]]:
    """Complete lines from stdin, in groups of what one read returned."""
    partial = b""
    while chunk := os.read(sys.stdin.fileno(), STDIN_READ_BYTES):
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()
        if lines:
            yield lines
    if partial:
        yield [partial]


@click.command()
@click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False),
    help="Stream directory to read: a publisher's DIR/<topic>.<host>, or a merged log.",
)
@click.option(
    "--from",
    "start",
    default="start",
    show_default=True,
    help="Where to start: 'start', 'end', or a position printed earlier "
    "(its next_position resumes after that message).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new messages (inotify).")
@click.option("--topic", "topics", multiple=True, help="Only this topic (repeat for several).")
@click.option(
    "--payload",
    "payload_format",
    type=click.Choice(["auto", "text", "base64"]),
    default="auto",
    show_default=True,
    help="auto: 'payload' as text when it is UTF-8, else 'payload_base64'.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Stop after this many messages."
)
def subscribe(
    directory: str,
    start: str,
    follow: bool,
    topics: tuple[str, ...],
    payload_format: str,
    limit: int | None,
) -> None:
    """Print messages as JSON lines.

    Each line has position, next_position, topic, host, timestamp (ISO 8601, UTC),
    timestamp_ns, id and the payload. Positions are opaque strings: store
    next_position to resume exactly after a message.
    """
    subscriber = Subscriber(directory)
    if start == "start":
        position = Position.ZERO
    elif start == "end":
        position = subscriber.end_position()
    else:
        position = Position.parse(start)
    out = sys.stdout
    count = 0
    for batch in subscriber.read_batches(position, follow=follow, topics=topics or None):
        for message in batch:
            out.write(_json_line(message, payload_format))
            count += 1
            if limit is not None and count >= limit:
                out.flush()
                return
        out.flush()


def _json_line(message: Message, payload_format: str) -> str:
    record: dict[str, object] = {
        "position": message.position.format(),
        "next_position": message.next_position.format(),
        "topic": message.topic,
        "host": message.host,
        "timestamp": _iso(message.timestamp_ns),
        "timestamp_ns": message.timestamp_ns,
        "id": message.id,
    }
    if payload_format == "base64":
        record["payload_base64"] = base64.b64encode(message.payload).decode()
    else:
        try:
            record["payload"] = message.payload.decode()
        except UnicodeDecodeError:
            if payload_format == "text":
                raise UsageError(
                    f"payload at {message.position.format()} is not UTF-8; use --payload base64"
                ) from None
            record["payload_base64"] = base64.b64encode(message.payload).decode()
    return json.dumps(record, separators=(",", ":")) + "\n"


def _iso(timestamp_ns: int) -> str:
    seconds, nanos = divmod(timestamp_ns, 1_000_000_000)
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos:09d}Z"
