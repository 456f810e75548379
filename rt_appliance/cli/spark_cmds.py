"""``rt spark-pipeline`` (a node's merged log into Parquet with Spark, exactly once) and
``rt spark-daemon`` (a Spark master or worker of the stream, authenticated)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from rt_appliance.cli.options import CONFIG
from rt_appliance.config import load_config
from rt_appliance.daemons.stop_signals import stop_event_on
from rt_appliance.errors import UsageError

SPARK_MISSING = (
    "Spark is not installed here: install the rt-appliance-spark package "
    "(or pip install 'rt-appliance[spark]') and Java 17 (apt-get install openjdk-17-jre-headless)"
)


@click.command("spark-pipeline")
@CONFIG
@click.option("--node", required=True, help="Name of this RT node (as in the config's nodes).")
@click.option(
    "--once",
    is_flag=True,
    help="Process what the merged log holds now (Trigger.AvailableNow), then exit "
    "(refused with spark.failover: the shared checkpoint is the lease holder's).",
)
def spark_pipeline(config_path: Path, node: str, once: bool) -> None:
    """Write this node's merged log to Parquet with Spark, exactly once across restarts.

    Reads <data_dir>/merged with the `rt` data source as a stream, applies
    spark.transform (module:function, DataFrame in and out), and appends Parquet
    partitioned by topic and date to spark.output_dir (default
    <data_dir>/spark/output), with Spark's checkpoint in spark.checkpoint_dir (default
    <data_dir>/spark/checkpoint). Spark runs as spark.master says (local[*] by
    default: on this node). With spark.failover, the output and checkpoint are on
    shared storage and the pipeline works only while its node holds the stream's
    spark-pipeline lease (granted through raft; `rt status` shows the holder); it
    stands by otherwise, and takes over from the checkpoint when it gets the lease. The
    committed position goes to <data_dir>/holds/spark-pipeline.json, so the
    archiver keeps every merged file the pipeline has not committed, unless the
    disk limit forces it; the pipeline then stops with an error naming the gap.
    Runs until SIGTERM or SIGINT (or, with --once, until caught up); prints the
    last micro-batch's progress as JSON. Needs Java 17. See docs/SPARK.md.
    """
    config = load_config(config_path)
    config.node(node)  # a clear error for an unknown node, before Spark starts
    try:
        from rt_appliance.spark.pipeline import run_pipeline
    except ImportError as exc:
        raise UsageError(f"{SPARK_MISSING} ({exc})") from None
    stop = stop_event_on()  # SIGTERM (systemd's stop) or SIGINT: finish the batch, exit
    try:
        progress = run_pipeline(config, node, once, stop)
    finally:
        _stop_spark()
    click.echo(json.dumps(progress, default=str))


def _stop_spark() -> None:
    """End the session (and its JVM) before exiting, not at interpreter teardown."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


@click.command(
    "spark-daemon",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@CONFIG
@click.option("--host", "host", required=True, help="Name of this host (as in the config).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def spark_daemon(config_path: Path, host: str, command: tuple[str, ...]) -> None:
    """Run COMMAND (a Spark master or worker: spark-class ...) as a daemon of the
    stream's Spark cluster: with the stream's Spark secret and Spark's
    authentication and encryption on.

    Reads the secret from <tls dir>/spark.secret (`rt certs init`) and refuses
    to start if it is missing, readable by every user, or malformed. The secret
    goes to the command in its environment, never on a command line; the web UI
    listens on localhost only. rt-spark-master.service and rt-spark-worker.service
    run this; see docs/SPARK.md.
    """
    config = load_config(config_path)
    config.host(host)  # a clear error for an unknown host
    from rt_appliance.spark.security import daemon_env

    env = daemon_env(config, host, os.environ)
    try:
        os.execvpe(command[0], list(command), env)
    except OSError as exc:
        raise UsageError(f"cannot run {command[0]}: {exc.strerror}") from None
