"""Merged records sent from memory: a node's pull server sends a committed record it was
handed (:mod:`rt_appliance.replicate.fresh`) before its merged file holds it, and reads
on from the file after it, byte for byte what the file says. Real files, real mutual
TLS, a real ``rt pull-client``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.log.format import decode_file_header
from rt_appliance.position import Position
from rt_appliance.replicate.pull_server import PullServer, ServerMetrics
from rt_appliance.replicate.topology import ServedStream
from rt_appliance.sequencer.merged import parse_merged_records
from rt_lab.testing.checkers import log_files
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config
from tests.integration.test_merged_log import build_merged
from tests.integration.test_pull import free_port

pytestmark = pytest.mark.integration

MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Built:
    """A merged log built whole, and where the records of its first file lie."""

    directory: Path
    first: str  # the first file's name
    data: bytes  # its bytes
    records: list[tuple[int, int]]  # (offset, end) of each merged record in it

    def position(self, offset: int) -> Position:
        _, session, roll = self.first.split(".")
        return Position.of(int(session), int(roll), offset)


def built_log(root: Path) -> Built:
    directory, _ = build_merged(root)
    first = sorted(p.name for p in directory.glob("log.*"))[0]
    data = (directory / first).read_bytes()
    header = decode_file_header(data)
    assert not isinstance(header, str)
    found, _, problem = parse_merged_records(data[header.header_bytes :], header.header_bytes)
    assert problem == "" and len(found) == 4  # build_merged: four ranges before the roll
    return Built(directory, first, data, [(r.offset, r.offset + r.nbytes) for r in found])


def test_a_stream_goes_on_after_records_sent_from_memory(tmp_path: Path) -> None:
    built = built_log(tmp_path / "built")
    (a, b), (c, d) = built.records[1], built.records[2]
    assert b == c
    served = tmp_path / "merged"
    served.mkdir()
    (served / built.first).write_bytes(built.data[:b])  # the merger wrote two records

    stream = ServedStream(served, Position.ZERO, MAX_BYTES)
    sent = b""
    while (chunk := stream.read()) is not None:
        sent += chunk[1]
    assert sent == built.data[:b] and stream.sent == built.position(b)

    # refused where the stream does not stand, or into another file: nothing moves
    assert not stream.skip(built.position(a), built.position(b))
    next_file = built.position(b)
    assert not stream.skip(
        built.position(b), Position.of(next_file.session, next_file.roll + 1, 64)
    )
    assert stream.sent == built.position(b)

    # the third record goes out from memory; the file gets it (and the fourth) later
    assert stream.skip(built.position(b), built.position(d))
    assert stream.sent == built.position(d)
    assert stream.read() is None  # the file does not hold it yet: nothing to read
    with open(served / built.first, "ab") as f:
        f.write(built.data[b:])
    rest = stream.read()
    assert rest is not None
    position, data, records = rest
    assert position == built.position(d)
    assert data == built.data[d:]  # the fourth record, its range record included
    assert records == 20 - 12  # build_merged's fourth range: messages 12..19 of a source
    assert stream.read() is None


@dataclass
class Server:
    pull: PullServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    def call(self, fn: object, *args: object) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn(*args)  # type: ignore[operator]
            finally:
                done.set()

        self.loop.call_soon_threadsafe(run)
        assert done.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    extra = {
        "ports": {"pull": free_port("127.0.0.1", "127.0.0.2", "127.0.0.3")},
        "replication": {"reconnect_initial_ms": 50, "reconnect_max_ms": 500},
    }
    config = load_config(write_local_config(tmp_path, nodes=3, extra=extra))
    (tmp_path / "data" / "rt-1" / "merged").mkdir(parents=True)
    loop = asyncio.new_event_loop()
    pull = PullServer(config, "rt-1", ServerMetrics(), watch=False)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(pull.start(), loop).result(20)
    try:
        yield Server(pull, loop, thread)
    finally:
        asyncio.run_coroutine_threadsafe(pull.stop(), loop).result(20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_pull_server_sends_a_committed_record_before_its_file_holds_it(
    tmp_path: Path, server: Server
) -> None:
    built = built_log(tmp_path / "built")
    (_, b), (c, d) = built.records[1], built.records[2]
    merged = tmp_path / "data" / "rt-1" / "merged"
    copy = tmp_path / "data" / "sub-1" / "sub" / "teststream"
    (merged / built.first).write_bytes(built.data[:b])
    client = Daemon(
        "sub-1",
        ["pull-client", "--config", str(tmp_path / "rt.yaml"), "--host", "sub-1"],
        tmp_path / "logs",
    ).start()
    try:
        wait_until(
            lambda: log_files(copy).get(built.first) == built.data[:b], 30, "the copy of the file"
        )
        assert server.pull.fresh.served == 0

        # the third record, as the node applies it: sent though the file lacks it
        record = built.data[c:d]
        server.call(server.pull.fresh_record, int(built.position(c)), record, 1)
        wait_until(
            lambda: log_files(copy).get(built.first) == built.data[:d], 20, "the record from memory"
        )
        assert (merged / built.first).read_bytes() == built.data[:b]
        assert server.pull.fresh.served == 1

        # the merger writes it and the next: the connection reads on from the file
        with open(merged / built.first, "ab") as f:
            f.write(built.data[b:])
        server.call(server.pull.changed)
        wait_until(lambda: log_files(copy).get(built.first) == built.data, 20, "the whole file")

        # the roll: the next file, its header and records, from the file as always
        second = sorted(p.name for p in built.directory.glob("log.*"))[1]
        (merged / f".{second}.new").write_bytes((built.directory / second).read_bytes())
        (merged / f".{second}.new").rename(merged / second)
        server.call(server.pull.changed)
        wait_until(lambda: log_files(copy) == log_files(built.directory), 20, "an identical copy")
        assert "cannot serve" not in client.log_path.read_text()
    finally:
        client.stop()
