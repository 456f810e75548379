"""Click parameter types and options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rt_appliance.errors import UsageError
from rt_appliance.sizes import parse_size

__all__ = ["CONFIG", "SIZE", "metrics_port_option"]


class SizeType(click.ParamType[int]):
    """A byte size with an optional unit: 4096, 64MiB, 1GiB, 10GB."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()


CONFIG = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("/etc/rt/rt.yaml"),
    show_default=True,
    help="The stream's configuration file (rt.yaml).",
)


def metrics_port_option(config_key: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--metrics-port``, defaulting to ``ports.<config_key>`` of the configuration."""
    return click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=None,
        help="Port of the Prometheus /metrics endpoint, on this host's address; 0 turns it "
        f"off  [default: the config's ports.{config_key}]",
    )
