"""``rt``: the command line of rt-appliance.

Every command maps library errors to one line on stderr and an exit code:
1 for an operating error (corruption, a full disk, a held lock), 2 for bad usage.
"""

from __future__ import annotations

import logging
import sys

import click

from rt_appliance import __version__
from rt_appliance.cli.lab import LabGroup
from rt_appliance.errors import RTError, UsageError

# Each command's module is imported only when that command runs (or help lists it): a
# daemon's start (`rt node`, `rt push-client`) does not pay for every other command's.
COMMANDS = {
    "publish": "rt_appliance.cli.pubsub_cmds:publish",
    "subscribe": "rt_appliance.cli.pubsub_cmds:subscribe",
    "log": "rt_appliance.cli.log_cmds:log_group",
    "push-client": "rt_appliance.cli.push_cmds:push_client",
    "replication": "rt_appliance.cli.replication_cmds:replication",
    "certs": "rt_appliance.cli.certs_cmds:certs",
    "pull-client": "rt_appliance.cli.pull_cmds:pull_client",
    "node": "rt_appliance.cli.node_cmds:node",
    "status": "rt_appliance.cli.status_cmds:status",
    "validate": "rt_appliance.cli.appliance_cmds:validate",
    "config": "rt_appliance.cli.appliance_cmds:config_group",
    "apply": "rt_appliance.cli.appliance_cmds:apply",
    "spark-pipeline": "rt_appliance.cli.spark_cmds:spark_pipeline",
    "spark-daemon": "rt_appliance.cli.spark_cmds:spark_daemon",
}


@click.group(
    cls=LabGroup,  # COMMANDS, and rt-lab's demo, bench and chaos when installed
    lazy=COMMANDS,
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
