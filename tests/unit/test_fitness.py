"""A node is unfit to lead from a failed write until UNFIT_HOLD_S pass without one."""

from __future__ import annotations

import errno

import pytest

from rt_appliance.errors import CorruptLogError, LogError, LogFullError
from rt_appliance.limits import UNFIT_HOLD_S
from rt_appliance.sequencer.fitness import Fitness, is_write_failure

pytestmark = pytest.mark.unit


def test_unfit_from_a_failure_until_the_hold_passes_quietly() -> None:
    now = [100.0]
    fitness = Fitness(clock=lambda: now[0])
    assert fitness.unfit() is None
    fitness.failed("input", "disk full")
    unfit = fitness.unfit()
    assert unfit is not None and unfit.cause == "input"
    assert str(unfit) == "cannot write its input: disk full"
    now[0] += UNFIT_HOLD_S / 2
    fitness.failed("merged_log", "EIO")  # the newest failure is the one named
    unfit = fitness.unfit()
    assert unfit is not None and unfit.cause == "merged_log"
    assert str(unfit) == "cannot write its merged log: EIO"
    now[0] += UNFIT_HOLD_S * 0.9  # the input's failure is old now, the merged log's not
    unfit = fitness.unfit()
    assert unfit is not None and unfit.cause == "merged_log"
    now[0] += UNFIT_HOLD_S * 0.2
    assert fitness.unfit() is None


def test_an_unknown_cause_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown cause"):
        Fitness().failed("disk", "full")


def _raised_from(cause: OSError, exc: Exception) -> Exception:
    try:
        raise exc from cause
    except Exception as raised:
        return raised


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS])
def test_storage_errors_are_write_failures(code: int) -> None:
    assert is_write_failure(OSError(code, "x"))
    wrapped = _raised_from(OSError(code, "x"), LogError("log.1.0: write failed"))
    assert is_write_failure(wrapped)
    full = _raised_from(OSError(code, "x"), LogFullError("log.1.0: disk full"))
    assert is_write_failure(full)


def test_other_errors_are_not() -> None:
    assert not is_write_failure(FileNotFoundError(errno.ENOENT, "gone"))
    assert not is_write_failure(LogError("merged record at 5 does not follow 4"))
    assert not is_write_failure(CorruptLogError("log.1.0", 12, "bad CRC"))


def test_each_failure_is_told_at_once_so_a_leader_need_not_wait_to_step_down() -> None:
    told: list[str | None] = []
    fitness = Fitness()
    fitness.on_failure = lambda: told.append(str(fitness.unfit()))
    fitness.failed("raft_journal", "no space left")
    fitness.failed("input", "EIO")
    assert told == ["cannot write its raft journal: no space left", "cannot write its input: EIO"]
