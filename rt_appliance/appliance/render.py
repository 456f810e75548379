"""Rendering a host's systemd units and files from the stream configuration (pure).

Units come from ``templates/rt-role.service`` (the Spark units from
``templates/rt-spark-*.service``), :class:`string.Template` files kept as package
data; this module only computes the values that fill them. Nothing here touches the
disk except reading the templates: :mod:`rt_appliance.appliance.apply` decides what
to write.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from rt_appliance.appliance.roles import (
    ROLE_TEMPLATE,
    SPARK_MASTER,
    SPARK_PIPELINE,
    SPARK_WORKER,
    Role,
    roles_of,
)
from rt_appliance.config.model import HostRole, NodeConfig, StreamConfig
from rt_appliance.config.spark import DEFAULT_JAVA_HOME
from rt_appliance.limits import (
    NOFILE_BASE,
    NOFILE_PER_PEER,
    SPARK_CPU_WEIGHT,
    SPARK_JVM_OVERHEAD_MIN_BYTES,
    SPARK_NOFILE,
    SPARK_WATCHDOG_S,
    SPARK_WORKER_DAEMON_MEMORY,
)

__all__ = [
    "CONFIG_PATH",
    "MARKER",
    "RTLOG_SCRIPT",
    "UNIT_DIR",
    "HostFile",
    "render_host",
    "render_unit",
    "unit_files",
]

CONFIG_PATH = PurePosixPath("/etc/rt/rt.yaml")  # where every unit reads the stream's config
UNIT_DIR = PurePosixPath("/etc/systemd/system")  # where rt apply writes units
DOC_DIR = PurePosixPath("/usr/share/doc/rt-appliance")  # where the package puts docs/
MARKER = "# Written by `rt apply`"  # first line of every unit rt apply owns
RTLOG_SCRIPT = PurePosixPath("/etc/rt/spark/rtlog-resource.sh")  # the worker's discovery script

# Who else may read and write the data directory: applications in the service group
# append to a publisher host's pub/ and read a subscriber host's copy of the merged log.
_UMASK = {HostRole.NODE: "0027", HostRole.PUBLISHER: "0007", HostRole.SUBSCRIBER: "0027"}
_DIR_MODE = {HostRole.NODE: "0750", HostRole.PUBLISHER: "0770", HostRole.SUBSCRIBER: "0750"}


@dataclass(frozen=True)
class HostFile:
    """A file ``rt apply`` installs: its absolute path on the host, content and mode."""

    path: PurePosixPath
    content: bytes
    mode: int
    group: str | None = None  # chgrp to this (it may be unreadable to others)
    owner: str | None = None  # chown to this
    directory: bool = False  # a directory to make (content unused)


def _template_text(name: str) -> str:
    return resources.files(__package__).joinpath(f"templates/{name}").read_text()


def _template(name: str = ROLE_TEMPLATE) -> string.Template:
    return string.Template(_template_text(name))


def _data_dir_setting(data_dir: PurePosixPath, role: HostRole) -> str:
    """systemd makes and owns a data directory under /var/lib; elsewhere it must exist."""
    var_lib = PurePosixPath("/var/lib")
    if data_dir.is_relative_to(var_lib) and data_dir != var_lib:
        return (
            f"StateDirectory={data_dir.relative_to(var_lib)}\nStateDirectoryMode={_DIR_MODE[role]}"
        )
    return f"ReadWritePaths={data_dir}"


def _limit_nofile(config: StreamConfig) -> int:
    peers = len(config.all_hosts()) + sum(len(p.topics) for p in config.publishers)
    return NOFILE_BASE + NOFILE_PER_PEER * peers


def render_unit(config: StreamConfig, host: str, role: Role) -> str:
    """The unit file text of ``role`` on ``host``."""
    if role.template != ROLE_TEMPLATE:
        return _render_spark_unit(config, host, role)
    kind, _ = roles_of(config, host)
    data_dir = PurePosixPath(config.data_dir_of(config.host(host)))
    settings = role.settings(config)
    memory_max = "infinity" if settings.memory_max is None else str(settings.memory_max)
    return _template().substitute(
        kind=kind.value,
        host=host,
        stream=config.stream,
        title=role.title,
        command=role.command,
        host_option=role.host_option,
        after="".join(f" {unit}" for unit in role.after),
        config_path=CONFIG_PATH,
        doc_dir=DOC_DIR,
        prefix=config.appliance.prefix,
        user=config.appliance.user,
        group=config.appliance.group,
        umask=_UMASK[kind],
        data_dir=data_dir,
        data_dir_setting=_data_dir_setting(data_dir, kind),
        watchdog_s=settings.watchdog_s,
        limit_nofile=_limit_nofile(config),
        memory_max=memory_max,
        cpu_weight=settings.cpu_weight,
    )


def spark_memory_max(memory: int) -> int:
    """MemoryMax= of a Spark unit whose JVM heaps may use ``memory`` bytes.

    On top of the heap a JVM takes metaspace, code cache, thread stacks and direct
    buffers (Arrow), and PySpark runs Python processes beside it: half the heap more,
    at least 1GiB.
    """
    return memory + max(SPARK_JVM_OVERHEAD_MIN_BYTES, memory // 2)


def spark_home(config: StreamConfig) -> PurePosixPath:
    """Where the rt-appliance-spark package puts pyspark (Spark's home)."""
    return PurePosixPath(config.appliance.prefix) / "spark" / "pyspark"


def spark_output_dir(config: StreamConfig, node: NodeConfig) -> PurePosixPath:
    """Where the pipeline of ``node`` writes Parquet: ``spark.output_dir`` or its data dir."""
    data_dir = PurePosixPath(config.data_dir_of(node))
    if config.spark.output_dir is None:
        return data_dir / "spark" / "output"
    return PurePosixPath(config.spark.output_dir.replace("{name}", node.name))


def _spark_extra_dirs(config: StreamConfig, node: NodeConfig) -> list[PurePosixPath]:
    """The output and checkpoint directories that lie outside the node's data directory
    (shared storage, for a pipeline that fails over)."""
    data_dir = PurePosixPath(config.data_dir_of(node))
    checkpoint = config.spark.checkpoint_dir
    dirs = [spark_output_dir(config, node)]
    dirs += [PurePosixPath(checkpoint)] if checkpoint is not None else []
    return [d for d in dirs if not d.is_relative_to(data_dir)]


def _render_spark_unit(config: StreamConfig, host: str, role: Role) -> str:
    spark, appliance = config.spark, config.appliance
    node = config.host(host)
    kind = config.role_of(host) or HostRole.NODE
    data_dir = PurePosixPath(config.data_dir_of(node))
    extra = _spark_extra_dirs(config, config.node(host)) if kind is HostRole.NODE else []
    values = {
        "kind": kind.value,
        "host": node.name,
        "stream": config.stream,
        "config_path": CONFIG_PATH,
        "doc_dir": DOC_DIR,
        "prefix": appliance.prefix,
        "user": appliance.user,
        "group": appliance.group,
        "data_dir": data_dir,
        "data_dir_setting": _data_dir_setting(data_dir, kind),
        "output_setting": "".join(f"\nReadWritePaths={d}" for d in extra),
        "java_home": spark.java_home or DEFAULT_JAVA_HOME,
        "spark_home": spark_home(config),
        # local mode talks to itself only; with a cluster, executors reach the driver
        "spark_local_ip": "127.0.0.1" if spark.master.startswith("local") else node.host,
        "address": node.host,
        "tls_dir": config.tls.dir_of(host),
        "watchdog_s": SPARK_WATCHDOG_S,
        "cpu_weight": SPARK_CPU_WEIGHT,
        "limit_nofile": SPARK_NOFILE,
    }
    if role == SPARK_MASTER:
        _, port = spark.cluster_master or ("", 0)
        values |= {
            "master_port": port,
            "webui_port": spark.master_webui_port,
            "daemon_memory": f"{SPARK_WORKER_DAEMON_MEMORY >> 20}m",
            "memory_max": SPARK_JVM_OVERHEAD_MIN_BYTES + SPARK_WORKER_DAEMON_MEMORY,
        }
    elif role == SPARK_WORKER:
        worker = spark.worker
        values |= {
            "worker_port": worker.port,
            "webui_port": worker.webui_port,
            "cores": worker.cores,
            "worker_memory": f"{worker.memory >> 20}m",
            "master_url": worker.master_url or "",
            "daemon_memory": f"{SPARK_WORKER_DAEMON_MEMORY >> 20}m",
            "discovery_script": RTLOG_SCRIPT,
            "memory_max": spark_memory_max(worker.memory) + SPARK_WORKER_DAEMON_MEMORY,
        }
    else:
        values["memory_max"] = spark_memory_max(spark.memory)
    return _template(role.template).substitute(values)


def unit_files(config: StreamConfig, host: str) -> dict[str, str]:
    """Every unit ``host`` runs, by unit file name."""
    _, roles = roles_of(config, host)
    return {role.unit: render_unit(config, host, role) for role in roles}


def render_host(config: StreamConfig, host: str, config_text: bytes) -> list[HostFile]:
    """Everything ``rt apply`` installs on ``host``: its units and the config itself.

    ``config_text`` is the configuration file as the operator wrote it (comments
    kept); the daemons read it from :data:`CONFIG_PATH`, readable by the service group.
    """
    files = [HostFile(CONFIG_PATH, config_text, 0o640, config.appliance.group)]
    for name, text in unit_files(config, host).items():
        files.append(HostFile(UNIT_DIR / name, text.encode(), 0o644))
    kind, _ = roles_of(config, host)
    data_dir = PurePosixPath(config.data_dir_of(config.host(host)))
    if not _data_dir_setting(data_dir, kind).startswith("StateDirectory="):
        # Outside /var/lib systemd does not make it, and ReadWritePaths= needs it to exist.
        user, group = config.appliance.user, config.appliance.group
        mode = int(_DIR_MODE[kind], 8)
        files.append(HostFile(data_dir, b"", mode, group, owner=user, directory=True))
    files.extend(_spark_files(config, host, roles_of(config, host)[1]))
    return files


def _spark_files(config: StreamConfig, host: str, roles: tuple[Role, ...]) -> list[HostFile]:
    """The worker's discovery script; output and checkpoint directories outside the data
    directory."""
    files = []
    if SPARK_WORKER in roles:
        script = _template_text("rtlog-resource.sh").encode()
        files.append(HostFile(RTLOG_SCRIPT, script, 0o755))
    if SPARK_WORKER in roles or SPARK_PIPELINE in roles:
        user, group = config.appliance.user, config.appliance.group
        mode = int(_DIR_MODE[HostRole.NODE], 8)
        for extra in _spark_extra_dirs(config, config.node(host)):  # ReadWritePaths= needs them
            files.append(HostFile(extra, b"", mode, group, owner=user, directory=True))
    return files
