"""Positions: where a record starts (or a reader resumes) in a stream file directory.

A position is one unsigned 64-bit integer with KX's layout::

     63            44 43          30 29                          0
    +----------------+--------------+-----------------------------+
    |  session (20)  |  roll (14)   |      byte offset (30)       |
    +----------------+--------------+-----------------------------+

``session`` is X and ``roll`` is Y of the file ``log.X.Y``; ``offset`` is a byte
offset inside that file, counted from the first byte of the file header. Users
treat positions as opaque; code builds and takes them apart only here.
``Position.ZERO`` (0) means "from the start of the log": sessions are numbered
from 1, so it never names a real file. An offset of 0 means "the start of that
file"; a reader skips the file header.
"""

from __future__ import annotations

from typing import Self

from rt_appliance.errors import InvalidPositionError
from rt_appliance.limits import MAX_OFFSET, MAX_ROLL, MAX_SESSION, OFFSET_BITS, ROLL_BITS

__all__ = ["Position"]

_SESSION_SHIFT = OFFSET_BITS + ROLL_BITS


class Position(int):
    """A 64-bit stream position; an ``int`` so it is frozen, ordered and cheap."""

    __slots__ = ()

    ZERO: Position

    @classmethod
    def of(cls, session: int, roll: int, offset: int) -> Self:
        """The position of ``offset`` in file ``log.<session>.<roll>``."""
        if not (0 <= session <= MAX_SESSION and 0 <= roll <= MAX_ROLL):
            raise InvalidPositionError(f"session {session} / roll {roll} out of range")
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidPositionError(f"offset {offset} out of range")
        return cls((session << _SESSION_SHIFT) | (roll << OFFSET_BITS) | offset)

    @classmethod
    def parse(cls, text: str | int) -> Self:
        """Parse a position as printed by :meth:`format` (decimal), or an int."""
        if isinstance(text, bool) or not isinstance(text, (str, int)):
            raise InvalidPositionError(f"not a position: {text!r}")
        try:
            value = int(text)
        except (TypeError, ValueError) as exc:
            raise InvalidPositionError(f"not a position: {text!r}") from exc
        if not 0 <= value < 1 << 64:
            raise InvalidPositionError(f"not a 64-bit position: {text!r}")
        return cls(value)

    def format(self) -> str:
        """The opaque text form users store and pass back: a decimal integer."""
        return str(int(self))

    @property
    def session(self) -> int:
        return self >> _SESSION_SHIFT

    @property
    def roll(self) -> int:
        return (self >> OFFSET_BITS) & MAX_ROLL

    @property
    def offset(self) -> int:
        return self & MAX_OFFSET

    @property
    def file_key(self) -> tuple[int, int]:
        """``(session, roll)``: which file this position is in."""
        return (self.session, self.roll)

    def with_offset(self, offset: int) -> Position:
        """The position of ``offset`` in the same file."""
        return Position.of(self.session, self.roll, offset)

    def __repr__(self) -> str:
        return f"Position(session={self.session}, roll={self.roll}, offset={self.offset})"

    def __str__(self) -> str:
        return self.format()


Position.ZERO = Position(0)
