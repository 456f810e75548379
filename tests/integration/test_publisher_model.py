"""A rule-based property test of the publisher log against an in-memory model.

Random sequences of publish, publish_batch, forced roll, reopen (a new session)
and crash (the process dies: no sync, then the last file is cut at a random byte,
as a lost page cache would leave it) must always read back as exactly the model:
the messages published, minus those whose records did not lie wholly before a cut.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rt_appliance import Message, Publisher, Subscriber
from rt_appliance.log.format import RECORD_HEADER
from rt_appliance.log.recovery import verify_directory
from rt_appliance.log.segments import list_files
from tests.helpers import crash

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC, HOST = "model", "host-1"


class PublisherModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="rt-model-"))
        self.directory = self.root / f"{TOPIC}.{HOST}"
        self.model: list[tuple[bytes, int]] = []  # (payload, id) that must be readable
        self.counter = 0
        self.sessions = 0
        self.pub: Publisher | None = None

    @initialize(roll_bytes=st.sampled_from([1024, 1500, 2048, 4096]))
    def start(self, roll_bytes: int) -> None:
        self.roll_bytes = roll_bytes
        self._open()

    def _open(self) -> None:
        self.pub = Publisher(self.root, TOPIC, HOST, roll_bytes=self.roll_bytes, fsync="never")
        self.sessions += 1
        assert self.pub.session == self.sessions

    def _payload(self, size: int) -> tuple[bytes, int]:
        self.counter += 1
        head = b"%d:" % self.counter
        return head + bytes((self.counter + k) % 251 for k in range(size)), self.counter

    @rule(size=st.integers(0, 700))
    def publish(self, size: int) -> None:
        assert self.pub is not None
        payload, mid = self._payload(size)
        position = self.pub.publish(payload, id=mid)
        self.model.append((payload, mid))
        assert position == self.pub.position.with_offset(
            self.pub.position.offset - RECORD_HEADER.size - len(payload)
        )

    @rule(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=12))
    def publish_batch(self, sizes: list[int]) -> None:
        assert self.pub is not None
        items = [self._payload(s) for s in sizes]
        last = self.pub.publish_batch([p for p, _ in items], ids=[i for _, i in items])
        self.model.extend(items)
        assert last.offset + RECORD_HEADER.size + len(items[-1][0]) == self.pub.position.offset

    @rule()
    def roll(self) -> None:
        assert self.pub is not None
        before = self.pub._writer.roll
        with self.pub._lock:
            self.pub._writer._roll()
        assert self.pub._writer.roll == before + 1

    @rule()
    def reopen(self) -> None:
        assert self.pub is not None
        self.pub.close()
        self._open()
        assert self.pub.recovery is None

    @rule(data=st.data())
    def crash_and_cut_the_last_file(self, data: st.DataObject) -> None:
        assert self.pub is not None
        messages = self._read()
        crash(self.pub)
        last = list_files(self.directory)[-1]
        size = last.path.stat().st_size
        cut = data.draw(st.integers(0, size), label="cut")
        os.truncate(last.path, cut)
        in_last = [(k, m) for k, m in enumerate(messages) if m.position.file_key == last.key]
        lost = [
            k for k, m in in_last if m.position.offset + RECORD_HEADER.size + len(m.payload) > cut
        ]
        header_bytes = in_last[0][1].position.offset if in_last else None
        if lost:
            self.model = self.model[: lost[0]]
        self._open()
        report = self.pub.recovery
        survivors_end = max(
            (
                m.position.offset + RECORD_HEADER.size + len(m.payload)
                for k, m in in_last
                if k not in lost
            ),
            default=None,
        )
        if header_bytes is not None and cut < header_bytes:
            assert report is not None and report.removed_file
        elif cut == size or (survivors_end is not None and cut == survivors_end):
            assert report is None
        elif report is not None and not report.removed_file:
            assert report.path == last.path
            assert report.lost_records == 1
            assert report.offset + report.lost_bytes == cut

    @precondition(lambda self: len(self.model) > 1)
    @rule(data=st.data())
    def resume_from_a_next_position(self, data: st.DataObject) -> None:
        messages = self._read()
        k = data.draw(st.integers(0, len(messages) - 1), label="resume index")
        rest = list(Subscriber(self.directory).read(messages[k].next_position))
        assert [(m.payload, m.id) for m in rest] == self.model[k + 1 :]

    @invariant()
    def log_reads_back_as_the_model(self) -> None:
        if self.pub is None:
            return
        messages = self._read()
        assert [(m.payload, m.id) for m in messages] == self.model
        for a, b in pairwise(messages):
            assert a.position < b.position
            if a.next_position.file_key == a.position.file_key == b.position.file_key:
                assert a.next_position == b.position
            else:  # a file boundary: resuming at the end of a file moves on to the next
                assert a.next_position.offset == a.position.offset + RECORD_HEADER.size + len(
                    a.payload
                )
                first = next(iter(Subscriber(self.directory).read(a.next_position)))
                assert first.position == b.position
        if messages:
            assert messages[-1].next_position == self.pub.position or (
                messages[-1].next_position.file_key < self.pub.position.file_key
            )

    def _read(self) -> list[Message]:
        return list(Subscriber(self.directory).read())

    def teardown(self) -> None:
        try:
            if self.pub is not None:
                self.pub.close()
                reports = verify_directory(self.directory)
                assert all(r.ok for r in reports), reports
                assert sum(r.records for r in reports) == len(self.model)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


PublisherModel.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_publisher_against_model = PublisherModel.TestCase
