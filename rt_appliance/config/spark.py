"""The ``spark:`` section of ``rt.yaml``: the pipeline on every RT node, and scale-out.

``rt spark-pipeline`` reads a node's merged log with the ``rt`` data source and
writes Parquet; ``rt apply`` renders ``rt-spark-pipeline.service`` on every node
when ``enabled``, and ``rt-spark-worker.service`` when ``worker.enabled``. Every
key is documented in ``etc/rt.yaml`` and ``docs/CONFIG.md``.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rt_appliance.config.types import FieldProblem, Port, Size

__all__ = ["DEFAULT_JAVA_HOME", "SECURITY_CONF", "SparkConfig", "SparkWorkerConfig"]

DEFAULT_JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"  # Debian's openjdk-17-jre-headless

_TRANSFORM = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)\])?|spark://[\w.-]+:[0-9]{1,5}")
_SPARK_URL = re.compile(r"spark://[\w.-]+:[0-9]{1,5}")

# What every Spark process of a standalone cluster runs with: the shared secret
# authenticates RPC, and keys derived from it encrypt RPC and shuffle traffic and the
# shuffle and spill files on disk. The appliance sets these itself (the secret from
# the tls directory); rt.yaml's spark.conf may not turn them off.
SECURITY_CONF = {
    "spark.authenticate": "true",
    "spark.network.crypto.enabled": "true",
    "spark.io.encryption.enabled": "true",
}
_SECRET_KEYS = ("spark.authenticate.secret",)  # the secret lives in a file, never in rt.yaml


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkWorkerConfig(_Model):
    """A standalone Spark worker on each node, advertising the ``rtlog`` resource."""

    enabled: bool = False  # render rt-spark-worker.service on every node
    master_url: str | None = None  # spark://host:port of the standalone master it joins
    cores: Annotated[int, Field(ge=1, le=1024)] = 2  # cores it offers to executors
    memory: Size = 2 << 30  # memory it offers to executors
    port: Port = 7078  # the worker's RPC port
    webui_port: Port = 8081  # its web UI

    @field_validator("master_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not _SPARK_URL.fullmatch(value):
            raise ValueError(f"master_url must be spark://host:port, got {value!r}")
        return value

    @model_validator(mode="after")
    def _needs_master(self) -> SparkWorkerConfig:
        if self.enabled and self.master_url is None:
            raise FieldProblem(("master_url",), "a worker needs master_url (spark://host:port)")
        if self.memory < 256 << 20:
            raise FieldProblem(("memory",), "memory must be at least 256MiB")
        return self


class SparkConfig(_Model):
    """The Spark pipeline that turns a node's merged log into Parquet."""

    enabled: bool = False  # render rt-spark-pipeline.service on every node
    master: str = "local[*]"  # local[*] (on the node) or spark://host:port
    transform: str | None = None  # "module:function" taking and returning a DataFrame
    codec: Literal["raw", "json", "arrow"] = "raw"  # how the source decodes payloads
    schema_ddl: str | None = Field(default=None, alias="schema")  # Spark DDL of the payload
    topics: list[str] | None = None  # only these topics; default: all
    output_dir: str | None = None  # Parquet; default <node data_dir>/spark/output
    checkpoint_dir: str | None = None  # Spark's checkpoint; default <data_dir>/spark/checkpoint
    failover: bool = False  # one pipeline for the stream, on shared storage, under a lease
    lease_ms: Annotated[int, Field(ge=6000, le=600_000)] = 10_000  # the lease's term
    trigger_interval_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 1000  # micro-batch period
    max_bytes_per_trigger: Size = 64 << 20  # most merged-log bytes one micro-batch reads
    memory: Size = 1 << 30  # the pipeline's driver memory (local mode: all of Spark's)
    java_home: str | None = None  # JAVA_HOME for the units; default: Debian's Java 17
    conf: dict[str, str] = Field(default_factory=dict)  # extra Spark settings, "spark.*"
    worker: SparkWorkerConfig = SparkWorkerConfig()
    master_webui_port: Port = 8080  # the standalone master's web UI, on its host's localhost

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("master")
    @classmethod
    def _master(cls, value: str) -> str:
        if not _MASTER.fullmatch(value):
            raise ValueError(
                f"master must be local, local[N], local[*] or spark://host:port, got {value!r}"
            )
        return value

    @field_validator("transform")
    @classmethod
    def _transform(cls, value: str | None) -> str | None:
        if value is not None and not _TRANSFORM.fullmatch(value):
            raise ValueError(f"transform must be module:function, got {value!r}")
        return value

    @field_validator("output_dir", "checkpoint_dir", "java_home")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    @field_validator("conf")
    @classmethod
    def _conf(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith("spark."):
                raise ValueError(f"conf keys are Spark settings (spark.*), got {key!r}")
        return value

    @model_validator(mode="after")
    def _codec_schema(self) -> SparkConfig:
        if self.codec == "json" and self.schema_ddl is None:
            raise FieldProblem(("schema",), "codec json needs schema (a Spark DDL string)")
        if self.max_bytes_per_trigger < 1 << 20:
            raise FieldProblem(
                ("max_bytes_per_trigger",), "max_bytes_per_trigger must be at least 1MiB"
            )
        if self.memory < 256 << 20:
            raise FieldProblem(("memory",), "memory must be at least 256MiB")
        return self

    @model_validator(mode="after")
    def _shared_when_failover(self) -> SparkConfig:
        if not self.failover:
            return self
        for key in ("output_dir", "checkpoint_dir"):
            value = getattr(self, key)
            if value is None:
                raise FieldProblem(
                    (key,),
                    f"failover needs {key} on storage every node mounts (NFS): the pipeline "
                    "continues from there on whichever node takes the lease",
                )
            if "{name}" in value:
                raise FieldProblem(
                    (key,), f"failover needs one {key} for the stream, not one per node ({{name}})"
                )
        output, checkpoint = (
            PurePosixPath(str(self.output_dir)),
            PurePosixPath(str(self.checkpoint_dir)),
        )
        if checkpoint.is_relative_to(output) or output.is_relative_to(checkpoint):
            raise FieldProblem(
                ("checkpoint_dir",), "checkpoint_dir and output_dir may not hold one another"
            )
        return self

    @model_validator(mode="after")
    def _one_secure_master(self) -> SparkConfig:
        urls = {u for u in (self.master, self.worker.master_url) if u and u.startswith("spark")}
        if self.worker.enabled and self.master.startswith("spark://") and len(urls) > 1:
            raise FieldProblem(
                ("master",),
                f"master {self.master} and worker.master_url {self.worker.master_url} name "
                "different masters; a stream has one Spark cluster",
            )
        if self.cluster_master_url is not None:
            for key in _SECRET_KEYS:
                if key in self.conf:
                    raise FieldProblem(
                        ("conf", key),
                        "the Spark secret is not kept in rt.yaml: `rt certs init` makes "
                        "spark.secret beside the certificates, and every Spark process reads it",
                    )
            for key, value in SECURITY_CONF.items():
                if key in self.conf and self.conf[key].strip().lower() != value:
                    raise FieldProblem(
                        ("conf", key),
                        f"a Spark cluster of the stream runs with {key}={value} (authenticated "
                        "and encrypted, like every other port of the stream)",
                    )
        return self

    @property
    def cluster_master_url(self) -> str | None:
        """The standalone master the stream's Spark cluster runs on (spark://host:port),
        or None when Spark runs in local mode only."""
        if self.worker.enabled:
            return self.worker.master_url
        return self.master if self.master.startswith("spark://") else None

    @property
    def cluster_master(self) -> tuple[str, int] | None:
        """The host and port of :attr:`cluster_master_url`."""
        url = self.cluster_master_url
        if url is None:
            return None
        host, port = url.removeprefix("spark://").rsplit(":", 1)
        return host, int(port)

    @property
    def driver_memory(self) -> str:
        """The memory setting as Spark spells it (``1024m``)."""
        return f"{self.memory >> 20}m"
