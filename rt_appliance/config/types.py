"""Value types shared by the configuration models: sizes with units, ports, located problems."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, WithJsonSchema

from rt_appliance.errors import UsageError
from rt_appliance.sizes import parse_size

__all__ = ["FieldProblem", "Port", "Size"]


class FieldProblem(ValueError):
    """A problem a model-level check found at ``loc``, a path below the model that raised it.

    Checks that compare several fields run on the whole model, so pydantic locates
    their errors at the model; ``load`` adds ``loc`` so the error names the field
    and its YAML line.
    """

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _size(value: object) -> object:
    if isinstance(value, str):
        try:
            return parse_size(value)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
    return value


# In the JSON Schema a size is a number of bytes or a string with a unit, as rt.yaml allows.
_SIZE_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {
            "type": "string",
            "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*([kKmMgGtT]([iI]?[bB])?|[bB])?\s*$",
        },
    ],
    "description": "bytes: 4096, or with a unit: 64KiB, 4MiB, 1GiB (binary), 10kB, 10MB (decimal)",
}
Size = Annotated[int, BeforeValidator(_size), Field(ge=0), WithJsonSchema(_SIZE_SCHEMA)]
Port = Annotated[int, Field(ge=1, le=65535)]
