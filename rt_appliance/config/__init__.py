"""The stream's configuration: ``etc/rt.yaml``, validated by pydantic."""

from rt_appliance.config.load import ConfigError, as_config, load_config, parse_config
from rt_appliance.config.model import (
    HostRole,
    NodeConfig,
    Ports,
    PublisherHost,
    ReplicationConfig,
    StreamConfig,
    SubscriberHost,
    TlsConfig,
)

__all__ = [
    "ConfigError",
    "HostRole",
    "NodeConfig",
    "Ports",
    "PublisherHost",
    "ReplicationConfig",
    "StreamConfig",
    "SubscriberHost",
    "TlsConfig",
    "as_config",
    "load_config",
    "parse_config",
]
