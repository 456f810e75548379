"""Helpers for sequencer tests: a local stream, publishing threads, the whole-log check."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rt_appliance import Subscriber
from rt_appliance.publish import Publisher
from rt_lab.testing.checkers import assert_clean, check_merged
from rt_lab.testing.stream import LocalStream


class Follower:
    """Follows a Subscriber from a thread (``read_batches(0, follow=True)``), handing each
    batch to ``take``; :attr:`error` is what ended the reading, if anything did."""

    def __init__(self, sub: Subscriber, take: Callable[[Iterable[Any]], None]) -> None:
        self.error: BaseException | None = None
        self._take = take
        self._thread = threading.Thread(target=self._run, args=(sub,), daemon=True)
        self._thread.start()

    def _run(self, sub: Subscriber) -> None:
        try:
            for batch in sub.read_batches(0, follow=True):
                self._take(batch)
        except BaseException as exc:
            self.error = exc


SMALL = {
    "sequencer": {"merged_roll_bytes": "1MiB", "max_range_bytes": "64KiB"},
}


class Feed:
    """Publishes ids 1.. to one publisher directory from a thread, at a rate."""

    def __init__(self, stream: LocalStream, host: str, topic: str, roll_bytes: int = 256 << 10):
        self.stream, self.host, self.topic = stream, host, topic
        self.directory = stream.publisher_root(host)  # the Publisher adds <topic>.<host>
        self.roll_bytes = roll_bytes
        self.payload_bytes = 0  # pad payloads to this size
        self.ids: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publish(self, first: int, last: int) -> None:
        """Publish ids first..last now (a new Publisher: a new session)."""
        with Publisher(self.directory, self.topic, self.host, roll_bytes=self.roll_bytes) as pub:
            for start in range(first, last + 1, 500):
                ids = list(range(start, min(last, start + 499) + 1))
                pub.publish_batch([self.payload(i) for i in ids], ids=ids)
                self.ids += ids

    def payload(self, i: int) -> bytes:
        return (b"%s-%d" % (self.host.encode(), i)).ljust(self.payload_bytes, b".")

    def start(self, rate: int) -> Feed:
        """Publish at ``rate`` msg/s in the background until :meth:`stop`."""

        def run() -> None:
            with Publisher(
                self.directory, self.topic, self.host, roll_bytes=self.roll_bytes
            ) as pub:
                i, t0 = 0, time.monotonic()
                while not self._stop.is_set():
                    due = int((time.monotonic() - t0) * rate)
                    if due <= i:
                        time.sleep(0.002)
                        continue
                    ids = list(range(len(self.ids) + 1, len(self.ids) + 1 + min(due - i, 1000)))
                    pub.publish_batch([self.payload(n) for n in ids], ids=ids)
                    pub.flush()
                    self.ids += ids
                    i += len(ids)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def source(self) -> tuple[str, str]:
        return (self.topic, self.host)


def check_stream(stream: LocalStream, feeds: list[Feed], timeout_s: float = 60.0) -> None:
    """Every node's merged log and every subscriber copy identical, every id once, in order."""
    expected = {f.source: list(f.ids) for f in feeds}
    copies = {s.name: stream.subscriber_dir(s.name) for s in stream.config.subscribers}
    report = check_merged(stream, expected, timeout_s=timeout_s, copies=copies, key="id")
    assert_clean(report, stream.logs())


@pytest.fixture
def local_stream(tmp_path: Path) -> Iterator[type[LocalStream]]:
    """``local_stream(nodes=..., ...)`` makes a stream in tmp_path; all are stopped at the end."""
    made: list[LocalStream] = []

    class Made(LocalStream):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(tmp_path / f"s{len(made)}", *args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Made
    for s in made:
        s.stop()
