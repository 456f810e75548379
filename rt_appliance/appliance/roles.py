"""Which daemons a host runs: its role in the stream decides its systemd units.

=============  ==============================================================
role           units
=============  ==============================================================
node           rt-sequencer, which runs ``rt node``: push server, sequencer and
               pull server in one process
               rt-spark-pipeline too when ``spark.enabled`` (after rt-sequencer)
               rt-spark-worker too when ``spark.enabled`` and ``spark.worker.enabled``
publisher      rt-push-client
subscriber     rt-pull-client
any            rt-spark-master on the host the Spark cluster's master URL names
               (``spark.worker.master_url``, or ``spark.master``) by name or address
=============  ==============================================================

The Spark units come from templates of their own (a JVM needs a looser sandbox, the
worker is Spark's own program) and take their settings from the ``spark:`` section,
not from ``appliance.units``. When a host no longer runs a unit, ``rt apply`` removes
the unit file it wrote earlier.
"""

from __future__ import annotations

from dataclasses import dataclass

from rt_appliance.config.model import HostRole, RoleUnitConfig, StreamConfig
from rt_appliance.invariants import invariant

__all__ = [
    "ROLES",
    "ROLE_TEMPLATE",
    "SPARK_MASTER",
    "SPARK_PIPELINE",
    "SPARK_WORKER",
    "Role",
    "needs_spark_secret",
    "roles_of",
]

ROLE_TEMPLATE = "rt-role.service"  # the template of the transport's daemons


@dataclass(frozen=True)
class Role:
    """One daemon as a systemd unit."""

    command: str  # the `rt` subcommand the unit runs
    title: str  # what the unit's Description says it is
    host_option: str  # how the subcommand is told which host it is: --node or --host
    after: tuple[str, ...] = ()  # units of the same host it starts after, when both run
    template: str = ROLE_TEMPLATE  # its file under templates/
    name: str = ""  # the unit's name, rt-<name>.service (default: the command's)

    @property
    def unit(self) -> str:
        return f"rt-{self.name or self.command}.service"

    @property
    def key(self) -> str:
        """Its key under ``appliance.units`` in rt.yaml."""
        return (self.name or self.command).replace("-", "_")

    def settings(self, config: StreamConfig) -> RoleUnitConfig:
        settings: RoleUnitConfig = getattr(config.appliance.units, self.key)
        return settings


ROLES: dict[HostRole, tuple[Role, ...]] = {
    HostRole.NODE: (
        # the name operators know; the process is the whole node
        Role("node", "node (push server, sequencer, pull server)", "--node", name="sequencer"),
    ),
    HostRole.PUBLISHER: (Role("push-client", "push client", "--host"),),
    HostRole.SUBSCRIBER: (Role("pull-client", "pull client", "--host"),),
}

# On nodes, when rt.yaml's spark section enables them.
SPARK_PIPELINE = Role(
    "spark-pipeline",
    "Spark pipeline",
    "--node",
    after=("rt-sequencer.service",),
    template="rt-spark-pipeline.service",
)
SPARK_WORKER = Role("spark-worker", "Spark worker", "--node", template="rt-spark-worker.service")
# On the host the master URL names, whatever its role.
SPARK_MASTER = Role("spark-master", "Spark master", "--host", template="rt-spark-master.service")


def _spark_roles(config: StreamConfig, role: HostRole) -> tuple[Role, ...]:
    if role is not HostRole.NODE or not config.spark.enabled:
        return ()
    return (SPARK_PIPELINE, SPARK_WORKER) if config.spark.worker.enabled else (SPARK_PIPELINE,)


def roles_of(config: StreamConfig, host: str) -> tuple[HostRole, tuple[Role, ...]]:
    """The role of ``host`` and the daemons it runs; a clear error if the stream lacks it."""
    config.host(host)  # a clear error if the stream lacks it
    role = config.role_of(host)
    invariant(role is not None, f"host {host} has no role")
    assert role is not None
    master = (SPARK_MASTER,) if config.spark_master_host() == host else ()
    return role, ROLES[role] + _spark_roles(config, role) + master


def needs_spark_secret(config: StreamConfig, host: str) -> bool:
    """Whether ``host`` runs a process of the stream's Spark cluster (its master, a
    worker, or a pipeline driving the cluster), which reads the Spark secret."""
    if config.spark.cluster_master_url is None:
        return False
    _, roles = roles_of(config, host)
    return any(role in (SPARK_MASTER, SPARK_WORKER, SPARK_PIPELINE) for role in roles)
