"""Click parameter types and options shared by several commands."""

from __future__ import annotations

from typing import Any

import click

from rt_appliance.errors import UsageError
from rt_appliance.sizes import parse_size

__all__ = ["SIZE"]


class SizeType(click.ParamType[int]):
    """A byte size with an optional unit: 4096, 64MiB, 1GiB, 10GB."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()
