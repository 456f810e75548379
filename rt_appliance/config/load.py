"""Loading ``rt.yaml``: YAML parsing, pydantic validation, errors with line and field path.

Every problem is reported, one per line, as ``FILE:LINE: field.path: message``;
the caller (``rt``) prints them and exits with status 2, writing nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rt_appliance.config.model import StreamConfig
from rt_appliance.config.types import FieldProblem
from rt_appliance.errors import UsageError

__all__ = ["ConfigError", "load_config", "parse_config"]

Loc = tuple[str | int, ...]


class ConfigError(UsageError):
    """A configuration file that cannot be used; ``problems`` lists every issue found."""

    def __init__(self, path: str, problems: list[str]) -> None:
        super().__init__(f"{path}: {len(problems)} problem(s)\n" + "\n".join(problems))
        self.path = path
        self.problems = problems


def _lines(node: yaml.Node, loc: Loc, out: dict[Loc, int], seen: set[int]) -> None:
    """Record the (1-based) line of every mapping value and list item under ``node``.

    A node an alias repeats is walked once (``seen``): an alias may name a node that holds
    it, and aliases of aliases repeat a node exponentially often.
    """
    out[loc] = node.start_mark.line + 1
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*loc, str(key.value))
            _lines(value, child, out, seen)
            out[child] = key.start_mark.line + 1  # a field's line is its key's line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*loc, i), out, seen)


def _line_of(loc: Loc, lines: dict[Loc, int]) -> int:
    while loc not in lines and loc:
        loc = loc[:-1]
    return lines.get(loc, 1)


def parse_config(text: str, path: str = "<config>") -> StreamConfig:
    """Validate the YAML ``text`` of a stream configuration."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data: Any = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        # ValueError: a scalar YAML cannot convert (an integer of more than 4300 digits, a
        # 13th month); RecursionError: collections nested too deep for the parser.
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError(
            path, [f"{path}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}"]
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            path, [f"{path}:1: the file must be a mapping of keys (stream:, nodes:, ...)"]
        )
    lines: dict[Loc, int] = {}
    if node is not None:
        _lines(node, (), lines, set())
    try:
        return StreamConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc: Loc = tuple(err["loc"])
            cause = err.get("ctx", {}).get("error")
            if isinstance(cause, FieldProblem):
                loc = (*loc, *cause.loc)
            field = ".".join(str(p) for p in loc) or "(top level)"
            message = err["msg"].removeprefix("Value error, ")
            problems.append(f"{path}:{_line_of(loc, lines)}: {field}: {message}")
        raise ConfigError(path, problems) from None


def as_config(value: str | os.PathLike[str] | StreamConfig) -> StreamConfig:
    """A loaded configuration as it is, or the one read from the file at ``value``."""
    return value if isinstance(value, StreamConfig) else load_config(Path(value))


def load_config(path: str | Path) -> StreamConfig:
    """Read and validate the configuration file at ``path``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"{path}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), [f"{path}: not UTF-8 text: byte {exc.start}"]) from None
    return parse_config(text, str(path))
