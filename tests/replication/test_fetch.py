"""FETCH with a real pull server (alone in its process) and real mutual TLS: rt-2 reads raw bytes of
rt-1's merged log and of its replica of a publisher directory."""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.config import StreamConfig, load_config
from rt_appliance.errors import FrameError, PeerRejectedError, TransportError, UsageError
from rt_appliance.limits import FRAME_MARGIN_BYTES
from rt_appliance.log.format import MAGIC
from rt_appliance.position import Position
from rt_appliance.replicate.fetch import FETCH_ROLE, Fetched, FetchRequest, PeerFetcher
from rt_appliance.transport.messages import FrameType, decode_control, encode_fetched
from rt_appliance.transport.session import connect
from rt_appliance.transport.tls import client_context
from rt_lab.testing import server_alone
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config
from tests.integration.test_merged_log import build_merged
from tests.integration.test_pull import free_port, log_files

pytestmark = pytest.mark.integration

MAX_FRAME_BYTES = 64 << 10
IN_DIR = "in/trades.pub-1"
DIR_RULE = "'merged' or 'in/<topic>.<host>'"


@dataclass
class Served:
    """rt-1's pull server, the directories it serves, and rt-2's fetcher."""

    work: Path
    config_path: Path
    config: StreamConfig
    metrics_port: int
    fetcher: PeerFetcher
    daemons: list[Daemon]

    @property
    def merged(self) -> Path:
        return self.work / "data" / "rt-1" / "merged"

    @property
    def replica(self) -> Path:
        return self.work / "data" / "rt-1" / "in" / "trades.pub-1"

    def start(self) -> Daemon:
        argv = server_alone.command("pull", self.config_path, "rt-1", self.metrics_port)
        daemon = Daemon("rt-1", [], self.work, program=argv)
        self.daemons.append(daemon.start())
        count = len(self.daemons)
        wait_until(lambda: daemon.log().count(" serves ") >= count, 10, "rt-1 to listen")
        return daemon

    def log(self) -> str:
        return self.daemons[-1].log()

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def fetch(self, dir: str, position: Position, max_bytes: int = 1 << 20) -> Fetched:
        return self.fetcher.fetch("rt-1", dir, position, max_bytes)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    extra: dict[str, object] = {
        "ports": {"pull": free_port("127.0.0.1", "127.0.0.2", "127.0.0.3")},
        "replication": {"max_frame_bytes": MAX_FRAME_BYTES},
    }
    config_path = write_local_config(tmp_path, nodes=3, extra=extra)
    config = load_config(config_path)
    merged, _ = build_merged(tmp_path / "build")
    shutil.copytree(merged, tmp_path / "data" / "rt-1" / "merged")
    # A replica as the push server leaves it: one publisher directory under in/.
    with Publisher(tmp_path / "data" / "rt-1" / "in", "trades", "pub-1", roll_bytes=96 << 10) as p:
        for i in range(2500):
            p.publish(f"trade-{i:05d} ".encode() + b"x" * (i % 120))
    s = Served(
        tmp_path, config_path, config, free_port("127.0.0.1"), PeerFetcher(config, "rt-2"), []
    )
    try:
        s.start()
        yield s
    finally:
        s.fetcher.close()
        for daemon in s.daemons:
            daemon.stop()


def start_of(name: str) -> Position:
    _, session, roll = name.split(".")
    return Position.of(int(session), int(roll), 0)


def copy_by_fetching(s: Served, dir: str, max_bytes: int) -> dict[str, bytes]:
    """Every file of ``dir`` on rt-1, read chunk by chunk as a node catching up would."""
    files: dict[str, bytes] = {}
    position = s.fetch(dir, Position.ZERO, 0).oldest
    while position is not None:
        got = s.fetch(dir, position, max_bytes)
        assert not got.missing and len(got.data) <= max_bytes
        name = f"log.{position.session}.{position.roll}"
        files[name] = files.get(name, b"") + got.data
        end = position.offset + len(got.data)
        position = position.with_offset(end) if end < got.file_size else got.next_file
    return files


def test_merged_from_the_start_a_middle_offset_and_the_next_file(served: Served) -> None:
    s = served
    files = log_files(s.merged)
    assert list(files) == ["log.1.0", "log.1.1"]
    first, second = files["log.1.0"], files["log.1.1"]

    # Offset 0: the file header and every record.
    got = s.fetch("merged", Position.of(1, 0, 0))
    assert got == Fetched(
        position=Position.of(1, 0, 0),
        data=first,
        file_size=len(first),
        next_file=Position.of(1, 1, 0),
        oldest=Position.of(1, 0, 0),
        missing=False,
    )
    assert got.data.startswith(MAGIC)

    # A middle offset (not a record boundary: the bytes are raw), at most max_bytes of them.
    got = s.fetch("merged", Position.of(1, 0, 101), max_bytes=57)
    assert got.data == first[101:158] and got.file_size == len(first)
    got = s.fetch("merged", Position.of(1, 0, len(first) - 5), max_bytes=57)
    assert got.data == first[-5:]  # fewer at the end of the file
    got = s.fetch("merged", Position.of(1, 0, len(first)))
    assert got.data == b"" and got.next_file == Position.of(1, 1, 0)

    # The last file has no next file.
    got = s.fetch("merged", Position.of(1, 1, 0))
    assert got.data == second and got.next_file is None and got.oldest == Position.of(1, 0, 0)

    # Position 0 names no file: it tells where the directory starts.
    got = s.fetch("merged", Position.ZERO, 0)
    assert got.missing and got.data == b"" and got.file_size == 0
    assert got.next_file == got.oldest == Position.of(1, 0, 0)

    # Reading the whole directory in small chunks gives the same bytes.
    assert copy_by_fetching(s, "merged", 1000) == files

    # New bytes appended to the newest file show at once.
    with open(s.merged / "log.1.1", "ab") as f:
        f.write(b"appended")
    got = s.fetch("merged", Position.of(1, 1, len(second)))
    assert got.data == b"appended" and got.file_size == len(second) + 8


def test_missing_and_pruned_files(served: Served) -> None:
    s = served
    got = s.fetch("merged", Position.of(7, 0, 0))
    assert got.missing and got.data == b"" and got.file_size == 0
    assert got.next_file is None and got.oldest == Position.of(1, 0, 0)

    (s.merged / "log.1.0").unlink()  # the archiver pruned it
    got = s.fetch("merged", Position.of(1, 0, 300))
    assert got.missing and got.data == b""
    assert got.oldest == got.next_file == Position.of(1, 1, 0)

    # A publisher directory rt-1 holds no replica of: no files at all.
    got = s.fetch("in/quotes.pub-9", Position.of(1, 0, 0))
    assert got.missing and got.oldest is None and got.next_file is None


def test_in_dir_and_the_frame_limit(served: Served) -> None:
    s = served
    files = log_files(s.replica)
    assert len(files) >= 3
    assert copy_by_fetching(s, IN_DIR, 7000) == files

    # A large max_bytes is cut to what one frame can carry.
    first = next(iter(files))
    limit = MAX_FRAME_BYTES - FRAME_MARGIN_BYTES
    assert len(files[first]) > limit
    got = s.fetch(IN_DIR, start_of(first), max_bytes=1 << 30)
    assert got.data == files[first][:limit]
    assert got.next_file == start_of(list(files)[1]) and got.oldest == start_of(first)

    assert re.search(r"rt_pull_server_fetches_total [1-9]", s.metrics())
    assert re.search(r"rt_pull_server_fetched_bytes_total [1-9]", s.metrics())


@pytest.mark.parametrize(
    "dir",
    [
        "in/../merged",
        "../merged",
        "merged/..",
        "in/trades",
        "in/",
        "in",
        "",
        "in/trades.pub-1/log.1.0",
        "in/trades.pub-1/..",
        "/etc",
        "in//etc",
        "in/trades..pub-1",
        "MERGED",
    ],
)
def test_bad_directory_names_are_refused(served: Served, dir: str) -> None:
    s = served
    with pytest.raises(PeerRejectedError, match=re.escape(DIR_RULE)) as refused:
        s.fetch(dir, Position.of(1, 0, 0))
    assert str(refused.value).startswith("rt-1 refused FETCH: cannot FETCH from directory")
    assert "refused a FETCH from rt-2" in s.log()
    # The server ended that connection; the next call reconnects.
    assert s.fetch("merged", Position.of(1, 0, 0), 8).data == MAGIC


def test_bad_request_fields_are_refused(served: Served) -> None:
    s = served
    with pytest.raises(PeerRejectedError, match="max_bytes is negative"):
        s.fetch("merged", Position.of(1, 0, 0), max_bytes=-1)

    async def raw(fields: dict[str, object]) -> dict[str, object]:
        conn, _ = await connect(
            "127.0.0.1", s.config.ports.pull, client_context(s.config.tls, "rt-2"), s.config,
            "rt-2", FETCH_ROLE, "rt-1",
        )  # fmt: skip
        try:
            await conn.send(FrameType.FETCH, fields)
            frame_type, body = await conn.receive()
            assert frame_type == FrameType.ERROR
            return decode_control(frame_type, body)
        finally:
            await conn.close()

    error = asyncio.run(raw({"dir": "merged", "max_bytes": 10}))
    assert "'position' missing" in str(error["message"]) and error["retryable"] is False
    error = asyncio.run(raw({"dir": "merged", "position": 1 << 64, "max_bytes": 10}))
    assert "not a 64-bit position" in str(error["message"])


async def _first_answer(s: Served, name: str, role: str) -> tuple[int, dict[str, object]]:
    """Connect as ``name`` saying ``role``, send one FETCH; the frame that comes back."""
    context = client_context(s.config.tls, name)
    conn, _ = await connect("127.0.0.1", s.config.ports.pull, context, s.config, name, role, "rt-1")
    try:
        await conn.send(FrameType.FETCH, {"dir": "merged", "position": 1 << 44, "max_bytes": 10})
        frame_type, body = await conn.receive()
        return frame_type, decode_control(frame_type, body)
    finally:
        await conn.close()


def test_only_nodes_may_fetch(served: Served) -> None:
    s = served
    # A subscriber host may connect (to pull) but not fetch.
    frame_type, error = asyncio.run(_first_answer(s, "sub-1", FETCH_ROLE))
    assert frame_type == FrameType.ERROR and error["retryable"] is False
    assert error["message"] == "host 'sub-1' is a subscriber: only nodes may FETCH"
    # A publisher may not connect at all.
    with pytest.raises(PeerRejectedError, match="publisher"):
        asyncio.run(_first_answer(s, "pub-1", FETCH_ROLE))
    # The pull conversation is unchanged: FETCH there is not allowed, even from a node.
    frame_type, error = asyncio.run(_first_answer(s, "rt-2", "pull"))
    assert frame_type == FrameType.ERROR and error["message"] == "unexpected frame type 12"
    # A fetcher must be a node itself.
    with pytest.raises(UsageError, match="no node named 'sub-1'"):
        PeerFetcher(s.config, "sub-1")
    with pytest.raises(UsageError, match="no node named 'rt-9'"):
        s.fetcher.fetch("rt-9", "merged", Position.ZERO, 0)

    wait_until(lambda: s.log().count("refused a pull connection") >= 2, 10, "two refusals")
    assert "only nodes may FETCH" in s.log()
    assert re.search(r"rt_pull_server_rejected_total 2\.0", s.metrics())
    assert re.search(r"rt_pull_server_fetches_total 0\.0", s.metrics())


def test_one_connection_shared_by_threads_and_reconnected(served: Served) -> None:
    s = served
    files = log_files(s.replica)
    names = list(files)
    for _ in range(5):
        assert s.fetch("merged", Position.of(1, 0, 0), 8).data == MAGIC

    # Eight threads at once on the same peer, each checking what it got.
    failures: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(25):
                name = rng.choice(names)
                offset = rng.randrange(len(files[name]))
                got = s.fetch(IN_DIR, start_of(name).with_offset(offset), rng.randrange(1, 9000))
                assert got.data == files[name][offset : offset + len(got.data)]
                assert got.data and got.file_size == len(files[name])
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert s.log().count("rt-2 connected from") == 1  # one connection, reused

    # The server restarts: the next call finds its connection closed and reconnects.
    s.daemons[-1].stop()
    s.start()
    assert s.fetch("merged", Position.of(1, 0, 0), 8).data == MAGIC
    assert s.log().count("rt-2 connected from") == 2

    # A node that does not listen: TransportError at once.
    with pytest.raises(TransportError, match="cannot connect"):
        s.fetcher.fetch("rt-3", "merged", Position.ZERO, 0)
    # A node that accepts TCP but never answers: TransportError after the timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.3", s.config.ports.pull))
        silent.listen()
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"no answer within 0\.5s"):
            s.fetcher.fetch("rt-3", "merged", Position.ZERO, 0, timeout_s=0.5)
        assert time.monotonic() - started < 3
    # ... and rt-1 still answers on the connection it had.
    assert s.fetch("merged", Position.of(1, 0, 0), 8).data == MAGIC
    assert s.log().count("rt-2 connected from") == 2

    s.fetcher.close()
    with pytest.raises(UsageError, match="closed"):
        s.fetch("merged", Position.ZERO, 0)


def test_answers_that_do_not_match_the_request_are_protocol_errors() -> None:
    request = FetchRequest("merged", Position.of(1, 0, 10), 4)
    good = Fetched(Position.of(1, 0, 10), b"abcd", 20, None, Position.of(1, 0, 0), False)

    def answer(head: dict[str, object], data: bytes = b"abcd") -> Fetched:
        return Fetched.from_frame(request, b"".join(encode_fetched(head, data)))

    assert answer(good.head("merged")) == good
    wrong: list[tuple[dict[str, object], bytes, str]] = [
        ({**good.head("merged"), "dir": "in/a.b"}, b"abcd", "answers 'in/a.b'"),
        ({**good.head("merged"), "position": int(Position.of(1, 0, 11))}, b"abcd", "answers"),
        (good.head("merged"), b"abcde", "more than the 4 asked"),
        ({**good.head("merged"), "file_size": 12}, b"abcd", "past the file's size 12"),
        ({**good.head("merged"), "missing": True}, b"abcd", "bytes of a missing file"),
        ({**good.head("merged"), "oldest": "x"}, b"abcd", "'oldest' missing or not int"),
        ({k: v for k, v in good.head("merged").items() if k != "next_file"}, b"", "next_file"),
    ]
    for head, data, message in wrong:
        with pytest.raises(FrameError, match=re.escape(message)):
            answer(head, data)
    with pytest.raises(FrameError, match="too short for its head"):
        Fetched.from_frame(request, b"\xff\x00{}")
