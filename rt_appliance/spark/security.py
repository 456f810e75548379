"""Spark's own security on a standalone cluster: every process reads the stream's secret.

Standalone Spark has no authentication unless told. On a cluster of the stream
(``spark.master`` or ``spark.worker.master_url`` a ``spark://`` URL), every Spark
process runs with :data:`~rt_appliance.config.spark.SECURITY_CONF`: RPC authenticated
with the stream's shared secret, RPC and shuffle traffic encrypted with keys derived
from it, shuffle and spill files encrypted on disk. How each gets the secret, never on
a command line:

* the master and the workers (``rt spark-daemon``, the units' wrapper around
  ``spark-class``): in the ``_SPARK_AUTH_SECRET`` environment variable, which Spark's
  daemons read, and the settings in ``SPARK_DAEMON_JAVA_OPTS``. Their executors get it
  from the worker the same way;
* a driver (``rt spark-pipeline``, or an application's session made by
  :func:`session_on_cluster`): in a properties file of its own (mode 0600, in a private
  directory, removed once read) that ``spark-submit --properties-file`` reads as the
  driver's JVM starts, since a driver on a standalone master takes the secret from its
  configuration only.

The master's and the workers' web UIs listen on the host's localhost only
(``SPARK_LOCAL_IP``; RPC listens on the address ``--host`` names).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rt_appliance.certs.secret import read_secret
from rt_appliance.config import StreamConfig
from rt_appliance.config.spark import SECURITY_CONF
from rt_appliance.errors import UsageError

__all__ = ["daemon_env", "driver_conf_file", "secret_of", "session_on_cluster"]

_SECRET_ENV = "_SPARK_AUTH_SECRET"  # what Spark's daemons and executors read it from
_SECRET_CONF = "spark.authenticate.secret"  # what a driver on a standalone master reads
_SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"  # how PySpark starts a driver's JVM
_LOCAL_IP = "SPARK_LOCAL_IP"  # the address a JVM of Spark binds to by default


def secret_of(config: StreamConfig, host: str) -> str:
    """The stream's Spark secret as ``host`` keeps it; a clear error if it cannot."""
    return read_secret(config.tls.spark_secret(host))


def daemon_env(config: StreamConfig, host: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a Spark master or worker of the stream on ``host``."""
    env = dict(environ)
    env[_SECRET_ENV] = secret_of(config, host)
    # and the master's REST submission port off: it takes jobs without authentication
    settings = {**SECURITY_CONF, "spark.master.rest.enabled": "false"}
    opts = " ".join(f"-D{key}={value}" for key, value in settings.items())
    env["SPARK_DAEMON_JAVA_OPTS"] = f"{opts} {env.get('SPARK_DAEMON_JAVA_OPTS', '')}".strip()
    env[_LOCAL_IP] = "127.0.0.1"  # the web UI; RPC listens where --host says
    return env


def driver_conf_file(config: StreamConfig, host: str, extra: Mapping[str, str]) -> Path:
    """A properties file for a driver on the stream's cluster: the security settings,
    the secret and ``extra``, in a new private directory (the caller removes it once
    the driver's JVM has read it: ``spark-submit --properties-file FILE``)."""
    secret = secret_of(config, host)
    folder = Path(tempfile.mkdtemp(prefix="rt-spark-"))  # mode 0700
    path = folder / "driver.properties"
    lines = [f"{key} {value}" for key, value in {**SECURITY_CONF, **extra}.items()]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join([*lines, f"{_SECRET_CONF} {secret}", ""]))
    return path


def session_on_cluster(builder: Any, config: StreamConfig, host: str) -> Any:
    """``builder.getOrCreate()`` (a ``SparkSession.Builder``) on the stream's Spark
    cluster, from ``host`` of the stream (this machine, whose Spark secret it reads, and
    whose address executors reach the driver at unless ``spark.driver.host`` is set):
    the master from rt.yaml, authenticated and encrypted. For example::

        spark = session_on_cluster(SparkSession.builder.appName("job"), config, "rt-1")
    """
    url = config.spark.cluster_master_url
    if url is None:
        raise UsageError("rt.yaml names no Spark cluster (spark.master is local)")
    # executors on other hosts reach the driver at this host's address from rt.yaml
    address = config.host(host).host
    conf_file = driver_conf_file(config, host, {"spark.driver.host": address})
    launch = {_SUBMIT_ARGS: f"--properties-file {conf_file} pyspark-shell"}
    launch.setdefault(_LOCAL_IP, os.environ.get(_LOCAL_IP, address))  # the driver's JVM
    before = {key: os.environ.get(key) for key in launch}
    os.environ.update(launch)
    try:
        return builder.master(url).getOrCreate()
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(conf_file.parent, ignore_errors=True)
