"""Rendering a host's systemd units and files from the stream configuration (pure).

Units come from ``templates/rt-role.service``, a :class:`string.Template` kept as
package data; this module only computes the values that fill it. Nothing here
touches the disk except reading the template: :mod:`rt_appliance.appliance.apply`
decides what to write.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from rt_appliance.appliance.roles import Role, roles_of
from rt_appliance.config.model import HostRole, StreamConfig

__all__ = [
    "CONFIG_PATH",
    "MARKER",
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

# Files a daemon holds besides its connections: base, plus so many per host and topic.
_NOFILE_BASE = 4096
_NOFILE_PER_PEER = 64

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


def _template() -> string.Template:
    text = resources.files(__package__).joinpath("templates/rt-role.service").read_text()
    return string.Template(text)


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
    return _NOFILE_BASE + _NOFILE_PER_PEER * peers


def render_unit(config: StreamConfig, host: str, role: Role) -> str:
    """The unit file text of ``role`` on ``host``."""
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
    return files
