"""The error tree: shape, retryability, and errors surviving a trip between processes."""

from __future__ import annotations

import pickle

import pytest

from rt_appliance import errors

pytestmark = pytest.mark.unit


def test_every_error_is_an_rt_error_and_retryability_is_declared() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    assert all(issubclass(c, errors.RTError) for c in classes)
    retryable = {c.__name__ for c in classes if c.retryable}
    assert retryable == {"LogLockedError", "LogFullError", "SenderLockedError", "TransportError"}
    assert issubclass(errors.FrameError, errors.TransportError) and not errors.FrameError.retryable
    assert issubclass(errors.PositionPrunedError, errors.PositionError)
    assert issubclass(errors.InvalidPositionError, errors.PositionError)
    assert issubclass(errors.PositionError, errors.LogError)
    assert not issubclass(errors.UsageError, errors.LogError)


@pytest.mark.parametrize("name", errors.__all__)
def test_errors_pickle_round_trip(name: str) -> None:
    cls = getattr(errors, name)
    error = cls("/x/log.1.0", 44, "CRC mismatch") if cls is errors.CorruptLogError else cls("boom")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    if cls is errors.CorruptLogError:
        assert (back.path, back.offset, back.reason) == ("/x/log.1.0", 44, "CRC mismatch")
        assert str(back) == "/x/log.1.0: corrupt at offset 44: CRC mismatch"
