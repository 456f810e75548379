"""The configuration model of one stream (``etc/rt.yaml``).

Every key, its default and unit is documented in ``etc/rt.yaml`` and
``docs/CONFIG.md``. Unknown keys are errors (``extra="forbid"``). Paths may
contain ``{name}``, replaced by the name of the host that uses them, so one file
can describe several nodes sharing one machine.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from rt_appliance.errors import UsageError
from rt_appliance.log.naming import validate_host, validate_topic
from rt_appliance.sizes import parse_size

__all__ = [
    "ArchiverConfig",
    "HostRole",
    "NodeConfig",
    "Ports",
    "PublisherHost",
    "ReplicationConfig",
    "SequencerConfig",
    "StreamConfig",
    "SubscriberHost",
    "TlsConfig",
]


def _size(value: object) -> object:
    if isinstance(value, str):
        try:
            return parse_size(value)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
    return value


Size = Annotated[int, BeforeValidator(_size), Field(ge=0)]
Port = Annotated[int, Field(ge=1, le=65535)]


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


class Ports(_Model):
    """TCP ports; every one carries mutual TLS except the HTTP metrics ports."""

    push_lb: Port = 5000  # push server as reached through the load balancer
    pull: Port = 5001  # pull server: merged log to subscribers, metadata
    push: Port = 5002  # push server: publisher files to this node
    raft: Port = 7100
    control: Port = 8000
    sequencer_metrics: Port = 4000
    push_server_metrics: Port = 4001
    pull_server_metrics: Port = 4002
    push_client_metrics: Port = 4003
    pull_client_metrics: Port = 4004


class NodeConfig(_Model):
    """One RT node."""

    name: str
    host: str  # address the node's servers bind and peers connect to
    advertised_host: str | None = None  # what clients are told (metadata); default: host
    advertised_pull_port: Port | None = None  # default: ports.pull
    data_dir: str | None = None  # default: the stream's data_dir

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
    keep_pruned: bool = False  # keep files the archiver pruned on the nodes
    prefer: Literal["follower", "leader", "any"] = "follower"

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _host = field_validator("host")(classmethod(lambda cls, v: _check_address(v)))


class TlsConfig(_Model):
    """Where certificates live: ``<dir>/ca.crt``, ``<dir>/<host name>.crt`` and ``.key``."""

    dir: str = "/etc/rt/tls"

    def ca(self) -> Path:
        return Path(self.dir) / "ca.crt"

    def cert(self, name: str) -> Path:
        return Path(self.dir) / f"{name}.crt"

    def key(self, name: str) -> Path:
        return Path(self.dir) / f"{name}.key"


class ReplicationConfig(_Model):
    """How push and pull replication behave."""

    fsync: Literal["always", "batch", "never"] = "batch"  # replica durability before an ack
    max_frame_bytes: Size = 4 << 20  # largest frame on the wire
    reconnect_initial_ms: Annotated[int, Field(ge=1)] = 100
    reconnect_max_ms: Annotated[int, Field(ge=1)] = 5000
    delete_acked: bool = True  # push client deletes rolled files every node acknowledged
    ack_timeout_ms: Annotated[int, Field(ge=100)] = 10_000  # unacked data this long: peer is gone
    # receiving side: sync (then ack) at most this often; appends stall while a sync runs
    sync_interval_ms: Annotated[int, Field(ge=0, le=1000)] = 10
    # sending side: a push client sends to a node at most this often; writes meanwhile join
    send_interval_ms: Annotated[int, Field(ge=0, le=1000)] = 1
    pull_source: str | None = None  # directory the pull server serves; default <data_dir>/merged

    @model_validator(mode="after")
    def _backoff(self) -> ReplicationConfig:
        if self.reconnect_max_ms < self.reconnect_initial_ms:
            raise ValueError("reconnect_max_ms must be at least reconnect_initial_ms")
        if not 64 << 10 <= self.max_frame_bytes <= 64 << 20:
            raise ValueError("max_frame_bytes must be between 64KiB and 64MiB")
        return self


class SequencerConfig(_Model):
    """How the sequencer merges inputs and runs raft (``rt sequencer``)."""

    merged_roll_bytes: Size = 1 << 30  # merged log file size at which the next file starts
    max_range_bytes: Size = 1 << 20  # most input bytes one merge instruction copies
    max_inflight: Annotated[int, Field(ge=1, le=1024)] = 32  # proposed, not yet applied
    report_interval_ms: Annotated[int, Field(ge=1, le=10_000)] = 50  # extents reported at least
    fetch_after_ms: Annotated[int, Field(ge=0, le=60_000)] = 300  # wait for push before repair
    raft_min_timeout_ms: Annotated[int, Field(ge=50)] = 400  # election timeout, lower bound
    raft_max_timeout_ms: Annotated[int, Field(ge=100)] = 1000  # election timeout, upper bound
    append_entries_period_ms: Annotated[int, Field(ge=5)] = 50  # leader heartbeat
    compaction_min_entries: Annotated[int, Field(ge=100)] = 20_000  # raft log entries
    compaction_min_s: Annotated[int, Field(ge=1)] = 600  # ... or this long since the last

    @model_validator(mode="after")
    def _timeouts(self) -> SequencerConfig:
        if self.raft_max_timeout_ms <= self.raft_min_timeout_ms:
            raise ValueError("raft_max_timeout_ms must be above raft_min_timeout_ms")
        if self.raft_min_timeout_ms <= 3 * self.append_entries_period_ms:
            raise ValueError("raft_min_timeout_ms must exceed 3 x append_entries_period_ms")
        if not 1 << 20 <= self.merged_roll_bytes <= 1 << 30:
            raise ValueError("merged_roll_bytes must be between 1MiB and 1GiB")
        if not 4 << 10 <= self.max_range_bytes <= self.merged_roll_bytes // 4:
            raise ValueError("max_range_bytes must be between 4KiB and merged_roll_bytes / 4")
        return self


class ArchiverConfig(_Model):
    """When the archiver prunes rolled merged files (never the newest). Unset rules are off."""

    retention_minutes: Annotated[float, Field(gt=0)] | None = None  # by a file's first timestamp
    max_log_bytes: Size | None = None  # total size of the merged log
    max_disk_usage_percent: Annotated[float, Field(gt=0, le=100)] = 90  # of the data filesystem
    interval_ms: Annotated[int, Field(ge=10)] = 5000  # how often the leader checks
    prune_inputs: bool = True  # delete in/ files once every record in them is merged


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
        names = [h.name for h in self.all_hosts()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(
                f"host names must be unique across nodes, publishers and subscribers: {dupes}"
            )
        node_addrs = [n.host for n in self.nodes]
        if len(set(node_addrs)) != len(node_addrs):
            raise ValueError("two nodes have the same host address")
        return self

    # -- lookups ------------------------------------------------------------------------

    def all_hosts(self) -> list[NodeConfig | PublisherHost | SubscriberHost]:
        return [*self.nodes, *self.publishers, *self.subscribers]

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

    def tls_for(self) -> TlsConfig:
        return self.tls

    @staticmethod
    def _names(hosts: list[NodeConfig] | list[PublisherHost] | list[SubscriberHost]) -> str:
        return ", ".join(h.name for h in hosts) or "none"


def _check_stream(value: str) -> str:
    try:
        return validate_topic(value)
    except UsageError:
        raise ValueError(f"invalid stream name {value!r}: letters, digits, '_' and '-'") from None
