"""The configuration model of one stream (``etc/rt.yaml``).

Every key, its default and unit is documented in ``etc/rt.yaml`` and
``docs/CONFIG.md``. Unknown keys are errors (``extra="forbid"``). Paths may
contain ``{name}``, replaced by the name of the host that uses them, so one file
can describe several nodes sharing one machine.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from rt_appliance.config.spark import SparkConfig
from rt_appliance.config.types import FieldProblem, Port, Size
from rt_appliance.errors import UsageError
from rt_appliance.limits import (
    DAEMON_BASE_BYTES,
    FRAMES_PER_CONNECTION,
    MAX_PAYLOAD_BYTES,
    RECORD_COPIES,
)
from rt_appliance.log.naming import validate_host, validate_topic
from rt_appliance.sizes import format_size

__all__ = [
    "ApplianceConfig",
    "ArchiverConfig",
    "FieldProblem",
    "HostRole",
    "NodeConfig",
    "Ports",
    "PublisherHost",
    "ReplicationConfig",
    "RoleUnitConfig",
    "SequencerConfig",
    "SparkConfig",
    "StreamConfig",
    "SubscriberHost",
    "TlsConfig",
    "UnitsConfig",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostRole(StrEnum):
    """What a host named in the configuration does; its certificate says which host it is."""

    NODE = "node"
    PUBLISHER = "publisher"
    SUBSCRIBER = "subscriber"


def _check_name(value: str) -> str:
    try:
        return validate_host(value)
    except UsageError as exc:
        raise ValueError(str(exc)) from None


def _check_address(value: str) -> str:
    """An IP address or a DNS name."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        _check_name(value)
    return value


def _refuse_removed(data: Any, removed: dict[str, str]) -> Any:
    """``data`` unchanged, unless it names a setting that is gone: say why, and to delete it."""
    if isinstance(data, dict):
        for key, why in removed.items():
            if key in data:
                raise FieldProblem((key,), f"{key} is no longer a setting: {why}; delete it")
    return data


_REMOVED_PORTS = {
    "push_server_metrics": "a node's push server runs inside rt node, whose metrics are "
    "all on ports.sequencer_metrics",
    "pull_server_metrics": "a node's pull server runs inside rt node, whose metrics are "
    "all on ports.sequencer_metrics",
}


class Ports(_Model):
    """TCP ports; every one carries mutual TLS except the HTTP metrics ports."""

    push_lb: Port = 5000  # push server as reached through the load balancer
    pull: Port = 5001  # pull server: merged log to subscribers, metadata
    push: Port = 5002  # push server: publisher files to this node
    raft: Port = 7100
    control: Port = 8000
    sequencer_metrics: Port = 4000  # rt node: its push server's, sequencer's, pull server's
    push_client_metrics: Port = 4003
    pull_client_metrics: Port = 4004

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return _refuse_removed(data, _REMOVED_PORTS)


class NodeConfig(_Model):
    """One RT node."""

    name: str
    host: str  # address the node's servers bind and peers connect to
    advertised_host: str | None = None  # what clients are told (metadata); default: host
    advertised_pull_port: Port | None = None  # default: ports.pull
    data_dir: str | None = None  # default: the stream's data_dir
    tls_dir: str | None = None  # this host's certificates; default: tls.dir

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _host = field_validator("host", "advertised_host")(
        classmethod(lambda cls, v: v if v is None else _check_address(v))
    )


class PublisherHost(_Model):
    """A host that publishes: its topics are replicated to every node."""

    name: str
    host: str = "127.0.0.1"  # its address (in its certificate; the push client's metrics bind it)
    topics: list[str] = Field(min_length=1)
    data_dir: str | None = None
    tls_dir: str | None = None

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _host = field_validator("host")(classmethod(lambda cls, v: _check_address(v)))

    @field_validator("topics")
    @classmethod
    def _topics(cls, topics: list[str]) -> list[str]:
        for topic in topics:
            try:
                validate_topic(topic)
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        if len(set(topics)) != len(topics):
            raise ValueError("a topic is listed twice on one host")
        return topics


class SubscriberHost(_Model):
    """A host that keeps a local copy of the merged log."""

    name: str
    host: str = "127.0.0.1"
    data_dir: str | None = None
    tls_dir: str | None = None
    keep_pruned: bool = False  # keep files the archiver pruned on the nodes
    prefer: Literal["follower", "leader", "any"] = "leader"  # which node to pull from

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _host = field_validator("host")(classmethod(lambda cls, v: _check_address(v)))


class TlsConfig(_Model):
    """Where certificates live: ``<dir>/ca.crt``, ``<dir>/<host name>.crt`` and ``.key``.

    ``dir`` may contain ``{name}``; a host's own ``tls_dir`` overrides it (the stream
    fills in those overrides when it is validated, so every lookup here is by host).
    """

    dir: str = "/etc/rt/tls"
    _host_dirs: dict[str, str] = PrivateAttr(default_factory=dict)

    def dir_of(self, name: str) -> Path:
        """The directory host ``name`` keeps its CA certificate, certificate and key in."""
        return Path(self._host_dirs.get(name, self.dir).replace("{name}", name))

    def ca(self, name: str) -> Path:
        return self.dir_of(name) / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.dir_of(name) / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir_of(name) / f"{name}.key"

    def spark_secret(self, name: str) -> Path:
        """The stream's Spark secret as host ``name`` keeps it (``rt certs init``)."""
        return self.dir_of(name) / "spark.secret"


_REMOVED_REPLICATION_KEYS = {
    "sync_interval_ms": "a push server syncs as soon as data arrives, and one sync covers "
    "everything that arrived while the one before it ran",
    "send_interval_ms": "a push client sends as soon as a publisher writes, and one send "
    "carries everything written while the one before it ran",
}


class ReplicationConfig(_Model):
    """How push and pull replication behave."""

    fsync: Literal["always", "batch", "never"] = "batch"  # replica durability before an ack
    max_frame_bytes: Size = 4 << 20  # largest frame on the wire
    reconnect_initial_ms: Annotated[int, Field(ge=1)] = 100
    reconnect_max_ms: Annotated[int, Field(ge=1)] = 5000
    delete_acked: bool = True  # push client deletes rolled files every node acknowledged
    ack_timeout_ms: Annotated[int, Field(ge=100)] = 10_000  # unacked data this long: peer is gone
    pull_source: str | None = None  # directory the pull server serves; default <data_dir>/merged

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return _refuse_removed(data, _REMOVED_REPLICATION_KEYS)

    @model_validator(mode="after")
    def _backoff(self) -> ReplicationConfig:
        if self.reconnect_max_ms < self.reconnect_initial_ms:
            raise FieldProblem(
                ("reconnect_max_ms",), "reconnect_max_ms must be at least reconnect_initial_ms"
            )
        if not 64 << 10 <= self.max_frame_bytes <= 64 << 20:
            raise FieldProblem(("max_frame_bytes",), "max_frame_bytes must be 64KiB..64MiB")
        return self


class SequencerConfig(_Model):
    """How the sequencer merges inputs and runs raft (inside ``rt node``)."""

    merged_roll_bytes: Size = 1 << 30  # merged log file size at which the next file starts
    max_range_bytes: Size = 1 << 20  # most input bytes one merge instruction copies
    max_inflight: Annotated[int, Field(ge=1, le=1024)] = 32  # proposed, not yet applied
    report_interval_ms: Annotated[int, Field(ge=1, le=10_000)] = 1000  # idle: a report this often
    fetch_after_ms: Annotated[int, Field(ge=0, le=60_000)] = 300  # wait for push before repair
    scrub_interval_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 10_000  # a merged file; 0: off
    raft_min_timeout_ms: Annotated[int, Field(ge=50)] = 400  # election timeout, lower bound
    raft_max_timeout_ms: Annotated[int, Field(ge=100)] = 1000  # election timeout, upper bound
    append_entries_period_ms: Annotated[int, Field(ge=5)] = 100  # leader heartbeat
    compaction_min_entries: Annotated[int, Field(ge=100)] = 4_000  # raft log entries
    compaction_min_s: Annotated[int, Field(ge=1)] = 600  # ... or this long since the last

    @model_validator(mode="after")
    def _timeouts(self) -> SequencerConfig:
        if self.raft_max_timeout_ms <= self.raft_min_timeout_ms:
            raise FieldProblem(
                ("raft_max_timeout_ms",), "raft_max_timeout_ms must be above raft_min_timeout_ms"
            )
        if self.raft_min_timeout_ms <= 3 * self.append_entries_period_ms:
            raise FieldProblem(
                ("raft_min_timeout_ms",),
                "raft_min_timeout_ms must exceed 3 x append_entries_period_ms",
            )
        if not 1 << 20 <= self.merged_roll_bytes <= 1 << 30:
            raise FieldProblem(
                ("merged_roll_bytes",), "merged_roll_bytes must be between 1MiB and 1GiB"
            )
        if not 4 << 10 <= self.max_range_bytes <= self.merged_roll_bytes // 4:
            raise FieldProblem(
                ("max_range_bytes",),
                "max_range_bytes must be between 4KiB and merged_roll_bytes / 4",
            )
        return self


class ArchiverConfig(_Model):
    """When the archiver prunes rolled merged files (never the newest). Unset rules are off."""

    retention_minutes: Annotated[float, Field(gt=0)] | None = None  # by a file's first timestamp
    max_log_bytes: Size | None = None  # total size of the merged log
    max_disk_usage_percent: Annotated[float, Field(gt=0, le=100)] = 90  # of the data filesystem
    interval_ms: Annotated[int, Field(ge=10)] = 5000  # how often the leader checks
    prune_inputs: bool = True  # delete in/ files once every record in them is merged


class RoleUnitConfig(_Model):
    """systemd resource settings of one role's unit (``rt apply``)."""

    watchdog_s: Annotated[int, Field(ge=2, le=3600)] = 10  # WatchdogSec: no ping this long, restart
    memory_max: Size | None = None  # MemoryMax: the unit's memory ceiling; unset: no limit
    cpu_weight: Annotated[int, Field(ge=1, le=10_000)] = 100  # CPUWeight: share of CPU under load


def _role(memory_max: int, cpu_weight: int = 100) -> RoleUnitConfig:
    return RoleUnitConfig(memory_max=memory_max, cpu_weight=cpu_weight)


class UnitsConfig(_Model):
    """Per-unit settings; every unit has its own defaults. ``sequencer`` is a node's
    unit, rt-sequencer.service, which runs ``rt node`` (push server, sequencer and pull
    server in one process)."""

    sequencer: RoleUnitConfig = _role(2 << 30, cpu_weight=300)
    push_client: RoleUnitConfig = _role(512 << 20)
    pull_client: RoleUnitConfig = _role(512 << 20)

    @model_validator(mode="before")
    @classmethod
    def _one_unit_per_node(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for gone in ("push_server", "pull_server"):
                if gone in data:
                    raise ValueError(
                        f"{gone}: a node runs one unit now, rt-sequencer.service (rt node: "
                        "push server, sequencer and pull server in one process); move its "
                        "settings to appliance.units.sequencer"
                    )
        return data


class ApplianceConfig(_Model):
    """How ``rt apply`` installs the stream on a host: the user, the install prefix, units."""

    user: str = "rt"  # system user every unit runs as (the package creates it)
    group: str = "rt"  # its group; publishing and subscribing applications join it
    prefix: str = "/opt/rt-appliance"  # where the package installed rt: <prefix>/bin/rt
    units: UnitsConfig = UnitsConfig()

    @field_validator("user", "group")
    @classmethod
    def _account(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", value):
            raise ValueError(
                f"{value!r} is not a valid system account name "
                "(lower-case letters, digits, '_', '-'; at most 32)"
            )
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() for c in value):
            raise ValueError(f"prefix must be an absolute path without spaces, got {value!r}")
        return value.rstrip("/") or "/"


class StreamConfig(_Model):
    """One stream: its nodes, publishers, subscribers, ports, TLS and data directories."""

    stream: str
    data_dir: str = "/var/lib/rt"
    nodes: list[NodeConfig]
    publishers: list[PublisherHost] = Field(default_factory=list)
    subscribers: list[SubscriberHost] = Field(default_factory=list)
    ports: Ports = Ports()
    load_balancer: str | None = None  # "host:port" in front of every node's push port
    tls: TlsConfig = TlsConfig()
    replication: ReplicationConfig = ReplicationConfig()
    sequencer: SequencerConfig = SequencerConfig()
    archiver: ArchiverConfig = ArchiverConfig()
    appliance: ApplianceConfig = ApplianceConfig()
    spark: SparkConfig = SparkConfig()

    _stream = field_validator("stream")(classmethod(lambda cls, v: _check_stream(v)))

    @field_validator("nodes")
    @classmethod
    def _node_count(cls, nodes: list[NodeConfig]) -> list[NodeConfig]:
        if len(nodes) not in (1, 3, 5, 7):
            raise ValueError(f"a stream has 1, 3, 5 or 7 nodes, not {len(nodes)}")
        return nodes

    @field_validator("load_balancer")
    @classmethod
    def _lb(cls, value: str | None) -> str | None:
        if value is not None:
            host, _, port = value.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"load_balancer must be host:port, got {value!r}")
            _check_address(host)
        return value

    @model_validator(mode="after")
    def _unique(self) -> StreamConfig:
        seen: set[str] = set()
        for loc, host in self._located_hosts():
            if host.name in seen:
                raise FieldProblem(
                    (*loc, "name"),
                    f"host name {host.name!r} is used twice: names are unique across "
                    "nodes, publishers and subscribers",
                )
            seen.add(host.name)
        addresses: set[str] = set()
        for i, node in enumerate(self.nodes):
            if node.host in addresses:
                raise FieldProblem(
                    ("nodes", i, "host"), f"two nodes have the same host address {node.host}"
                )
            addresses.add(node.host)
        return self

    @model_validator(mode="after")
    def _memory(self) -> StreamConfig:
        """Each role's MemoryMax must hold what the role may hold: frames per connection for
        the replication roles, whole records of the largest payload for the sequencer.
        Otherwise the kernel would kill the daemon at the first large record, again and
        again: an accepted payload could not travel."""
        units = self.appliance.units
        frame = self.replication.max_frame_bytes
        # a node's connections: one per publisher host (push), one per subscriber host and
        # per other node (pull)
        node_connections = (
            max(1, len(self.publishers)) + len(self.subscribers) + len(self.nodes) - 1
        )
        need = {
            "push_client": (len(self.nodes), 0),
            "pull_client": (1, 0),
            "sequencer": (node_connections, RECORD_COPIES),
        }
        for role, (connections, copies) in need.items():
            settings: RoleUnitConfig = getattr(units, role)
            frames = FRAMES_PER_CONNECTION * frame * connections
            least = DAEMON_BASE_BYTES + copies * MAX_PAYLOAD_BYTES + frames
            if settings.memory_max is None or settings.memory_max >= least:
                continue
            key = f"appliance.units.{role}.memory_max"
            holds = (
                f"up to {FRAMES_PER_CONNECTION} frames of replication.max_frame_bytes "
                f"({format_size(frame)}) per connection ({connections} connection(s))"
            )
            if copies:
                holds = f"{copies} copies of a record of the largest payload (64MiB) and {holds}"
            why = (
                f"the process needs {format_size(DAEMON_BASE_BYTES)} plus {holds}, "
                f"{format_size(least)} in all"
            )
            explicit = role in units.model_fields_set and "memory_max" in settings.model_fields_set
            if explicit:
                raise FieldProblem(
                    ("appliance", "units", role, "memory_max"),
                    f"{format_size(settings.memory_max)} is too small: {why}; raise it"
                    + ("" if copies else " or lower replication.max_frame_bytes"),
                )
            raise FieldProblem(  # the default memory_max is fine: the frame is not
                ("replication", "max_frame_bytes"),
                f"{format_size(frame)} is too large for {key} ({format_size(settings.memory_max)}"
                f", its default): {why}; lower it or set {key}",
            )
        return self

    @model_validator(mode="after")
    def _paths(self) -> StreamConfig:
        for loc, host in self._located_hosts():
            for key in ("data_dir", "tls_dir"):
                value = getattr(host, key)
                if value is not None and not value.startswith("/"):
                    raise FieldProblem((*loc, key), f"must be an absolute path, got {value!r}")
        if not self.data_dir.startswith("/"):
            raise FieldProblem(("data_dir",), f"must be an absolute path, got {self.data_dir!r}")
        if not self.tls.dir.startswith("/"):
            raise FieldProblem(("tls", "dir"), f"must be an absolute path, got {self.tls.dir!r}")
        # Every lookup of a host's certificates goes through tls; give it the overrides.
        tls = self.tls.model_copy()
        tls._host_dirs = {h.name: h.tls_dir for h in self.all_hosts() if h.tls_dir is not None}
        object.__setattr__(self, "tls", tls)
        return self

    def _located_hosts(
        self,
    ) -> list[tuple[tuple[str, int], NodeConfig | PublisherHost | SubscriberHost]]:
        return [
            *((("nodes", i), h) for i, h in enumerate(self.nodes)),
            *((("publishers", i), h) for i, h in enumerate(self.publishers)),
            *((("subscribers", i), h) for i, h in enumerate(self.subscribers)),
        ]

    # -- lookups ------------------------------------------------------------------------

    def all_hosts(self) -> list[NodeConfig | PublisherHost | SubscriberHost]:
        return [*self.nodes, *self.publishers, *self.subscribers]

    def host(self, name: str) -> NodeConfig | PublisherHost | SubscriberHost:
        """The node, publisher or subscriber host called ``name``."""
        for host in self.all_hosts():
            if host.name == name:
                return host
        known = ", ".join(h.name for h in self.all_hosts())
        raise UsageError(f"host {name!r} is not in stream {self.stream} (hosts: {known})")

    def spark_master_host(self) -> str | None:
        """The host of the stream that runs the Spark cluster's master: the one whose name
        or address the master URL names. None in local mode, or when the master is
        outside the stream (its operator runs it)."""
        master = self.spark.cluster_master
        if master is None:
            return None
        return next((h.name for h in self.all_hosts() if master[0] in (h.name, h.host)), None)

    def role_of(self, name: str) -> HostRole | None:
        if any(n.name == name for n in self.nodes):
            return HostRole.NODE
        if any(p.name == name for p in self.publishers):
            return HostRole.PUBLISHER
        if any(s.name == name for s in self.subscribers):
            return HostRole.SUBSCRIBER
        return None

    def node(self, name: str) -> NodeConfig:
        for n in self.nodes:
            if n.name == name:
                return n
        raise UsageError(
            f"no node named {name!r} in stream {self.stream} (nodes: {self._names(self.nodes)})"
        )

    def publisher(self, name: str) -> PublisherHost:
        for p in self.publishers:
            if p.name == name:
                return p
        raise UsageError(
            f"no publisher host {name!r} in stream {self.stream} ({self._names(self.publishers)})"
        )

    def subscriber(self, name: str) -> SubscriberHost:
        for s in self.subscribers:
            if s.name == name:
                return s
        raise UsageError(
            f"no subscriber host {name!r} in stream {self.stream} ({self._names(self.subscribers)})"
        )

    def data_dir_of(self, host: NodeConfig | PublisherHost | SubscriberHost) -> Path:
        return Path((host.data_dir or self.data_dir).replace("{name}", host.name))

    @staticmethod
    def _names(hosts: list[NodeConfig] | list[PublisherHost] | list[SubscriberHost]) -> str:
        return ", ".join(h.name for h in hosts) or "none"


def _check_stream(value: str) -> str:
    try:
        return validate_topic(value)
    except UsageError:
        raise ValueError(f"invalid stream name {value!r}: letters, digits, '_' and '-'") from None
