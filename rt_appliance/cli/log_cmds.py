"""``rt log verify`` and ``rt log inspect``: look at stream files without changing them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rt_appliance.errors import UsageError
from rt_appliance.limits import MAX_PAYLOAD_BYTES
from rt_appliance.log.format import FILE_KIND_MERGED, RECORD_HEADER
from rt_appliance.log.reader import FileReader
from rt_appliance.log.recovery import FileReport, verify_directory, verify_file
from rt_appliance.log.scan import check_record
from rt_appliance.position import Position


@click.group("log")
def log_group() -> None:
    """Check and inspect stream files (log.X.Y)."""


@log_group.command()
@click.argument("target", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def verify(target: str, as_json: bool) -> None:
    """Check every record's CRC in a directory (or one file).

    For each file: valid records, valid bytes (where its valid data ends) and
    size. A torn tail in the last file (left by a crash; the next writer cuts
    it) is reported but is not an error. Exit status 1 if anything is corrupt:
    a bad record followed by valid ones, or damage in a file that has later files.
    """
    path = Path(target)
    reports = verify_directory(path) if path.is_dir() else [verify_file(path)]
    corrupt = any(r.error is not None for r in reports)
    if as_json:
        click.echo(
            json.dumps({"ok": not corrupt, "files": [_report_dict(r) for r in reports]}, indent=2)
        )
    else:
        click.echo(f"{'file':<16} {'records':>12} {'valid_bytes':>14} {'size_bytes':>14}  status")
        for r in reports:
            click.echo(
                f"{r.path.name:<16} {r.records:>12} {r.valid_bytes:>14} {r.size_bytes:>14}  "
                + _status(r)
            )
        total_records = sum(r.records for r in reports)
        total_bytes = sum(r.valid_bytes for r in reports)
        click.echo(
            f"{'total':<16} {total_records:>12} {total_bytes:>14}  {len(reports)} files, "
            + ("CORRUPT" if corrupt else "ok")
        )
    if corrupt:
        sys.exit(1)


def _status(r: FileReport) -> str:
    if r.error is not None:
        return f"CORRUPT at offset {r.error.offset}: {r.error.reason}"
    if r.tail.kind == "clean":
        return "ok"
    cut = r.size_bytes - r.valid_bytes
    return f"{r.tail.kind} tail at offset {r.tail.offset}: {cut} bytes ({r.tail.reason})"


def _report_dict(r: FileReport) -> dict[str, object]:
    return {
        "file": str(r.path),
        "records": r.records,
        "valid_bytes": r.valid_bytes,
        "size_bytes": r.size_bytes,
        "tail": r.tail.kind,
        "status": _status(r),
        "corrupt_offset": None if r.error is None else r.error.offset,
    }


@log_group.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Records to list (0: header only).",
)
@click.option(
    "--offset", type=click.IntRange(min=0), default=0, help="Start listing at this byte offset."
)
@click.option(
    "--payload-bytes",
    type=click.IntRange(min=0),
    default=32,
    show_default=True,
    help="Payload bytes to show per record.",
)
def inspect(file: str, limit: int, offset: int, payload_bytes: int) -> None:
    """Show a stream file's header and its records, one per line.

    Each record line: byte offset, position, kind, payload length, timestamp_ns,
    id and the start of the payload. Stops at the first bad record and says why.
    """
    path = Path(file)
    with FileReader(path) as reader:
        h = reader.header
        kind = "merged" if h.kind == FILE_KIND_MERGED else "publisher"
        click.echo(
            f"file {path}\n  kind {kind}  session {h.session}  roll {h.roll}  "
            f"created_ns {h.created_ns}\n  topic {h.topic!r}  host {h.host!r}  "
            f"header_bytes {h.header_bytes}  size_bytes {reader.size()}"
        )
        if 0 < offset < h.header_bytes:
            raise UsageError(
                f"--offset {offset} falls inside the file header ({h.header_bytes} bytes)"
            )
        at = max(offset, h.header_bytes)
    if limit == 0:
        return
    with open(path, "rb") as f:
        f.seek(at)
        shown = 0
        while shown < limit:
            head = f.read(RECORD_HEADER.size)
            if not head:
                click.echo(f"{at:>12}  end of file")
                return
            _, length, kind_b, _, _, ts, rid = RECORD_HEADER.unpack(
                head.ljust(RECORD_HEADER.size, b"\0")
            )
            body = (
                f.read(length)
                if len(head) == RECORD_HEADER.size and length < MAX_PAYLOAD_BYTES
                else b""
            )
            problem = check_record(head + body, 0)[2]
            if problem:
                click.echo(f"{at:>12}  stop: {problem}")
                return
            pos = Position.of(h.session, h.roll, at).format()
            click.echo(
                f"{at:>12}  {pos:>20}  {'range' if kind_b else 'msg':<5} {length:>8} "
                f"{ts:>20} {rid:>12}  {body[:payload_bytes]!r}"
            )
            at += RECORD_HEADER.size + length
            shown += 1
