"""rt's threads under SCHED_BATCH (transport/scheduling.py): per thread, inherited by the
threads it starts, the application's own threads left alone, and a refusal harmless."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from rt_appliance.errors import UsageError
from rt_appliance.transport.background import LoopThread
from rt_appliance.transport.scheduling import ENV, batch_this_thread

pytestmark = pytest.mark.skipif(
    not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is a Linux scheduling policy"
)


def in_thread(work: Callable[[], object]) -> object:
    """``work()``'s result, run on a new thread (whose policy the test may change)."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def policy() -> int:
    return os.sched_getscheduler(0)


def test_the_calling_thread_and_those_it_starts_run_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    before = policy()

    def work() -> tuple[bool, int, object]:
        done = batch_this_thread()
        return done, policy(), in_thread(policy)

    assert in_thread(work) == (True, os.SCHED_BATCH, os.SCHED_BATCH)
    assert policy() == before  # this thread was not touched
    assert in_thread(lambda: (batch_this_thread(), batch_this_thread())) == (True, True)


def test_normal_leaves_the_policy_and_a_wrong_value_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "normal")
    assert in_thread(lambda: (batch_this_thread(), policy())) == (False, os.SCHED_OTHER)
    monkeypatch.setenv(ENV, "fifo")
    with pytest.raises(UsageError, match="RT_SCHEDULING='fifo': expected batch"):
        batch_this_thread()


def test_a_refused_call_leaves_the_thread_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)

    def refuse(*_: object) -> None:  # what a seccomp filter's EPERM looks like
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert in_thread(lambda: (batch_this_thread(), policy())) == (False, os.SCHED_OTHER)


def test_an_in_process_clients_thread_runs_batch_the_application_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    seen: list[int] = []

    async def main(stop: object) -> None:
        seen.append(policy())

    def application() -> int:
        client = LoopThread("rt-test-client", main)
        client.start()
        client.stop()
        return policy()

    assert in_thread(application) == os.SCHED_OTHER
    assert seen == [os.SCHED_BATCH]
