"""Positions: building, parsing, formatting, taking apart, and their order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rt_appliance.errors import InvalidPositionError
from rt_appliance.limits import MAX_OFFSET, MAX_ROLL, MAX_SESSION
from rt_appliance.log.naming import file_name_of
from rt_appliance.position import Position

pytestmark = pytest.mark.unit

sessions = st.integers(0, MAX_SESSION)
rolls = st.integers(0, MAX_ROLL)
offsets = st.integers(0, MAX_OFFSET)
fields = st.tuples(sessions, rolls, offsets)


@given(sessions, rolls, offsets)
def test_fields_round_trip(session: int, roll: int, offset: int) -> None:
    p = Position.of(session, roll, offset)
    assert (p.session, p.roll, p.offset) == (session, roll, offset)
    assert p.file_key == (session, roll)
    assert int(p) == session << 44 | roll << 30 | offset
    assert 0 <= p < 2**64
    assert p.with_offset(7) == Position.of(session, roll, 7)
    assert repr(p) == f"Position(session={session}, roll={roll}, offset={offset})"


@given(st.integers(0, 2**64 - 1))
def test_text_round_trips(value: int) -> None:
    p = Position.parse(value)
    assert p.format() == str(value) == str(p)
    assert Position.parse(p.format()) == p
    assert isinstance(Position.parse(p.format()), Position)
    assert Position.of(p.session, p.roll, p.offset) == p


@given(fields, fields)
def test_order_is_session_roll_offset_order(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    pa, pb = Position.of(*a), Position.of(*b)
    assert (pa < pb) == (a < b)
    assert (pa == pb) == (a == b)


@given(sessions.filter(bool), rolls)
def test_file_name_of_position(session: int, roll: int) -> None:
    assert file_name_of(Position.of(session, roll, 99)) == f"log.{session}.{roll}"


@pytest.mark.parametrize(
    "bad", ["", "abc", "-1", str(2**64), "1.5", 1.5, None, True, -1, 2**64, b"12"]
)
def test_parse_refuses_what_is_not_a_position(bad: object) -> None:
    with pytest.raises(InvalidPositionError):
        Position.parse(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "fields",
    [(MAX_SESSION + 1, 0, 0), (0, MAX_ROLL + 1, 0), (0, 0, MAX_OFFSET + 1), (-1, 0, 0), (0, 0, -1)],
)
def test_of_refuses_fields_out_of_range(fields: tuple[int, int, int]) -> None:
    with pytest.raises(InvalidPositionError):
        Position.of(*fields)


def test_zero_is_the_start() -> None:
    assert Position.ZERO == 0
    assert Position.ZERO.session == 0
    assert Position.parse("0") == Position.ZERO
