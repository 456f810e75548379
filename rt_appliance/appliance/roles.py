"""Which daemons a host runs: its role in the stream decides its systemd units.

=============  ==============================================================
role           units
=============  ==============================================================
node           rt-push-server, rt-sequencer, rt-pull-server (start in this order)
publisher      rt-push-client
subscriber     rt-pull-client
=============  ==============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from rt_appliance.config.model import HostRole, RoleUnitConfig, StreamConfig
from rt_appliance.invariants import invariant

__all__ = ["ROLES", "Role", "roles_of"]


@dataclass(frozen=True)
class Role:
    """One daemon as a systemd unit."""

    command: str  # the `rt` subcommand the unit runs
    title: str  # what the unit's Description says it is
    host_option: str  # how the subcommand is told which host it is: --node or --host
    after: tuple[str, ...] = ()  # units of the same host it starts after, when both run

    @property
    def unit(self) -> str:
        return f"rt-{self.command}.service"

    @property
    def key(self) -> str:
        """Its key under ``appliance.units`` in rt.yaml."""
        return self.command.replace("-", "_")

    def settings(self, config: StreamConfig) -> RoleUnitConfig:
        settings: RoleUnitConfig = getattr(config.appliance.units, self.key)
        return settings


ROLES: dict[HostRole, tuple[Role, ...]] = {
    HostRole.NODE: (
        Role("push-server", "push server", "--node"),
        Role("sequencer", "sequencer", "--node", after=("rt-push-server.service",)),
        Role("pull-server", "pull server", "--node", after=("rt-sequencer.service",)),
    ),
    HostRole.PUBLISHER: (Role("push-client", "push client", "--host"),),
    HostRole.SUBSCRIBER: (Role("pull-client", "pull client", "--host"),),
}


def roles_of(config: StreamConfig, host: str) -> tuple[HostRole, tuple[Role, ...]]:
    """The role of ``host`` and the daemons it runs; a clear error if the stream lacks it."""
    config.host(host)  # a clear error if the stream lacks it
    role = config.role_of(host)
    invariant(role is not None, f"host {host} has no role")
    assert role is not None
    return role, ROLES[role]
