"""``rt``: the command line of rt-appliance.

Every command maps library errors to one line on stderr and an exit code:
1 for an operating error (corruption, a full disk, a held lock), 2 for bad usage.
"""

from __future__ import annotations

import logging
import sys

import click

from rt_appliance import __version__
from rt_appliance.cli.appliance_cmds import apply, config_group, validate
from rt_appliance.cli.certs_cmds import certs
from rt_appliance.cli.lab import LabGroup
from rt_appliance.cli.log_cmds import log_group
from rt_appliance.cli.node_cmds import node
from rt_appliance.cli.pubsub_cmds import publish, subscribe
from rt_appliance.cli.pull_cmds import pull_client
from rt_appliance.cli.push_cmds import push_client
from rt_appliance.cli.replication_cmds import replication
from rt_appliance.cli.spark_cmds import spark_pipeline
from rt_appliance.cli.status_cmds import status
from rt_appliance.errors import RTError, UsageError


@click.group(
    cls=LabGroup,  # adds rt-lab's demo, bench and chaos when installed
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="rt")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="How much the command logs to stderr.",
)
def cli(log_level: str) -> None:
    """rt-appliance: a reliable streaming transport.

    Publishers append messages to local stream files (log.X.Y); subscribers
    read them back from an opaque restart position. Run `rt demo` for a tour,
    and `rt COMMAND --help` for each command.
    """
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


cli.add_command(publish)
cli.add_command(subscribe)
cli.add_command(log_group)
cli.add_command(push_client)
cli.add_command(replication)
cli.add_command(certs)
cli.add_command(pull_client)
cli.add_command(node)
cli.add_command(status)
cli.add_command(validate)
cli.add_command(config_group)
cli.add_command(apply)
cli.add_command(spark_pipeline)


def main() -> None:
    """Entry point of the ``rt`` console script."""
    try:
        code = cli.main(prog_name="rt", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except click.exceptions.Abort:
        click.echo("rt: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except UsageError as exc:
        click.echo(f"rt: error: {exc}", err=True)
        sys.exit(2)
    except RTError as exc:
        click.echo(f"rt: error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
