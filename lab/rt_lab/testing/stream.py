"""A whole stream on this machine, as real processes: what tests, the demo and benchmarks run.

``LocalStream`` writes an ``rt.yaml`` with :func:`write_local_config` (nodes on
127.0.0.1, .2, .3 ..., publisher hosts on 127.0.1.x, subscriber hosts on
127.0.2.x, certificates in ``work/tls``) and runs every daemon as its own
process (:class:`Daemon`), its output in ``work/logs/<role>-<host>.log``:

* per node: ``rt node`` (push server, sequencer and pull server in one process),
  named ``sequencer-<node>`` as its unit is (``rt-sequencer.service``);
* per publisher host: ``rt push-client``; per subscriber host: ``rt pull-client``
  (unless the applications replicate and pull in process).

:meth:`LocalStream.status` runs ``rt status --json`` as an operator would;
:meth:`LocalStream.quick_status` asks the same of the nodes from this process,
cheaply enough to poll in a loop (``leader`` and ``wait_leader`` use it), and
:meth:`LocalStream.node_status` gives each node's answer as a typed
:class:`~rt_appliance.nodestatus.NodeStatus`.

Faults act on a node's process with :meth:`LocalStream.kill_node` and
:meth:`LocalStream.start_node`.
:meth:`LocalStream.stop` ends every process it started, also when used as a
context manager that is left by an exception.

By default every port is a free one (checked on every address), so several
streams and other test suites can run side by side; ``ports="default"`` keeps
the configuration's defaults (5001, 5002, 7100, 8000, ...).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import yaml

from rt_appliance.config import StreamConfig, load_config
from rt_appliance.config.model import Ports
from rt_appliance.errors import RTError
from rt_appliance.log.naming import publisher_dir_name
from rt_appliance.replicate.topology import pull_source_dir, replica_dir
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config

if TYPE_CHECKING:
    from rt_appliance.nodestatus import Answer

__all__ = [
    "NODE_PROCESS",
    "NODE_ROLES",
    "LocalStream",
    "free_ports",
    "listen_port_range",
    "ports_in_use",
]

NODE_ROLES = ("push-server", "sequencer", "pull-server")  # what every node process runs
NODE_PROCESS = "sequencer"  # a node's process is keyed as its unit: rt-sequencer.service
_RT = (sys.executable, "-m", "rt_appliance.cli")
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long

# Quick reconnects: a restarted daemon is found again within a second.
_DEFAULT_EXTRA: dict[str, Any] = {
    "replication": {"reconnect_initial_ms": 50, "reconnect_max_ms": 1000},
}


def _addresses(nodes: int, publishers: int, subscribers: int) -> list[str]:
    """The loopback addresses :func:`write_local_config` gives the hosts."""
    return (
        [f"127.0.0.{i}" for i in range(1, nodes + 1)]
        + [f"127.0.1.{i}" for i in range(1, publishers + 1)]
        + [f"127.0.2.{i}" for i in range(1, subscribers + 1)]
    )


def _bindable(port: int, addresses: Iterable[str]) -> bool:
    try:
        for address in addresses:
            with socket.socket() as s:
                s.bind((address, port))
    except OSError:
        return False
    return True


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def listen_port_range() -> tuple[int, int]:
    """Ports to listen on that the kernel never hands to an outgoing connection: below
    its ephemeral range (or above it, if that leaves more). A listening port inside that
    range can be taken by any client's connection while its daemon is down, and the
    restarted daemon then fails with "address already in use"."""
    try:
        low, high = (int(v) for v in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32_768, 60_999  # Linux's default
    below = (10_000, low - 1)
    above = (high + 1, 65_535)
    return below if below[1] - below[0] >= above[1] - above[0] else above


def free_ports(addresses: Iterable[str], count: int) -> list[int]:
    """``count`` distinct TCP ports that nothing is bound to on any of ``addresses``,
    outside the kernel's ephemeral range (:func:`listen_port_range`)."""
    addresses = list(addresses)
    first, last = listen_port_range()
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randint(first, last)
        if port not in chosen and _bindable(port, addresses):
            chosen.append(port)
    return chosen


def ports_in_use(addresses: Iterable[str], ports: Ports | None = None) -> list[int]:
    """Which of ``ports`` (default: the configuration defaults) are taken on ``addresses``."""
    addresses = list(addresses)
    values = (ports or Ports()).model_dump().values()
    return sorted(p for p in set(values) if not _bindable(p, addresses))


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``over``, nested mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


class LocalStream:
    """A stream of ``nodes`` RT nodes with publisher and subscriber hosts, in ``work``.

    ``publishers`` maps publisher host names to their topics (default
    ``{"pub-1": ["trades"]}``), ``subscribers`` lists subscriber host names
    (default ``["sub-1"]``), ``extra`` overrides configuration keys (nested
    mappings are merged). ``prefixes`` maps a host name to a command prefix for its
    daemons (``ip netns exec NS``: the host in its own network namespace) and
    ``environments`` to variables they get. The configuration and certificates are
    written by the constructor; :meth:`start` starts the processes.
    """

    def __init__(
        self,
        work: Path,
        nodes: int = 3,
        publishers: dict[str, list[str]] | None = None,
        subscribers: list[str] | None = None,
        extra: Mapping[str, Any] | None = None,
        ports: Literal["free", "default"] = "free",
        prefixes: Mapping[str, list[str]] | None = None,
        environments: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.work = Path(work)
        self.prefixes = dict(prefixes or {})  # host -> command prefix (a network namespace)
        self.environments = dict(environments or {})  # host -> variables its daemons get
        self.log_dir = self.work / "logs"
        publishers = publishers if publishers is not None else {"pub-1": ["trades"]}
        subscribers = subscribers if subscribers is not None else ["sub-1"]
        doc = dict(_DEFAULT_EXTRA)
        if ports == "free":
            addresses = _addresses(nodes, len(publishers), len(subscribers))
            names = list(Ports.model_fields)
            doc["ports"] = dict(zip(names, free_ports(addresses, len(names)), strict=True))
        doc = _merge(doc, extra or {})
        self.config_path = write_local_config(self.work, nodes, publishers, subscribers, doc)
        self.config: StreamConfig = load_config(self.config_path)
        self.daemons: dict[str, Daemon] = {}  # "<role>-<host>" -> its daemon
        self.views: dict[str, Path] = {}  # host -> the configuration its daemons read

    def set_view(self, host: str, nodes: list[dict[str, Any]]) -> Path:
        """Give host ``host``'s daemons a configuration of their own, the stream's with
        ``nodes`` as its node list (how that host reaches the nodes, as through relays).
        Call before the host's daemons are first started."""
        doc = yaml.safe_load(self.config_path.read_text())
        doc["nodes"] = nodes
        path = self.work / "views" / f"{host}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        load_config(path)  # a clear error now rather than in every daemon's log
        self.views[host] = path
        return path

    # -- the processes -------------------------------------------------------------------

    def _daemon(self, role: str, host: str) -> Daemon:
        key = f"{role}-{host}"
        if key not in self.daemons:
            option = "--node" if role == NODE_PROCESS else "--host"
            command = "node" if role == NODE_PROCESS else role
            args = [command, "--config", str(self.views.get(host, self.config_path)), option, host]
            env = self.environments.get(host)
            self.daemons[key] = Daemon(
                key, args, self.log_dir, self.prefixes.get(host), dict(env) if env else None
            )
        return self.daemons[key]

    def start(self, push_clients: bool = True, pull_clients: bool = True) -> LocalStream:
        """Start every daemon: the nodes' first, then the publisher and subscriber hosts'
        (without ``push_clients`` / ``pull_clients``: the applications replicate or pull
        in process)."""
        try:
            for node in self.node_names:
                self.start_node(node)
            for pub in self.config.publishers if push_clients else []:
                self._daemon("push-client", pub.name).start()
            for sub in self.config.subscribers if pull_clients else []:
                self._daemon("pull-client", sub.name).start()
        except BaseException:
            self.stop()
            raise
        return self

    def node_daemon(self, name: str) -> Daemon:
        """The ``rt node`` process of node ``name``."""
        self.config.node(name)  # a clear error for an unknown node
        return self._daemon(NODE_PROCESS, name)

    def kill_node(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to node ``name``'s process and wait for it to exit: SIGKILL is a
        crash, SIGTERM a clean stop."""
        self.node_daemon(name).kill(sig)

    def start_node(self, name: str) -> None:
        """Start node ``name``'s process unless it is running."""
        daemon = self.node_daemon(name)
        if not daemon.running:
            daemon.start()

    def publisher_daemon(self, host: str) -> Daemon:
        """The ``rt push-client`` of publisher host ``host``."""
        self.config.publisher(host)
        return self._daemon("push-client", host)

    def subscriber_daemon(self, host: str) -> Daemon:
        """The ``rt pull-client`` of subscriber host ``host``."""
        self.config.subscriber(host)
        return self._daemon("pull-client", host)

    def exited(self) -> dict[str, int]:
        """Daemons that were started and have exited since: ``{name: exit status}``."""
        return {
            key: code
            for key, d in self.daemons.items()
            if d.proc is not None and (code := d.proc.poll()) is not None
        }

    def pids(self) -> dict[str, int]:
        """``{daemon name: pid}`` of the daemons running now."""
        return {k: d.proc.pid for k, d in self.daemons.items() if d.running and d.proc is not None}

    def stop(self) -> None:
        """Stop every daemon: SIGTERM to all at once, SIGKILL to those still running after
        :data:`STOP_GRACE_S`. Safe to call twice."""
        running = [d for d in self.daemons.values() if d.running]
        for d in running:
            d.send(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for d in running:
            assert d.proc is not None
            try:
                d.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                d.kill(signal.SIGKILL)

    def __enter__(self) -> LocalStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- asking the stream ------------------------------------------------------------

    def status(self, timeout_s: float = 20.0) -> dict[str, Any]:
        """What ``rt status --config C --json`` prints; exit status 1 (a node unreachable)
        is an answer too. Raises :class:`RTError` if the command fails otherwise."""
        try:
            done = subprocess.run(
                [*_RT, "status", "--config", str(self.config_path), "--json"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            raise RTError(f"rt status did not answer within {timeout_s}s") from exc
        if done.returncode in (0, 1):
            try:
                answer = json.loads(done.stdout)
            except ValueError:
                answer = None
            if isinstance(answer, dict):
                return answer
        raise RTError(
            f"rt status exited {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}"
        )

    def quick_status(self, timeout_s: float = 8.0) -> dict[str, Any]:
        """The document ``rt status --json`` prints, asked from this process over each
        node's control channel (no interpreter to start: for polling loops such as
        timing a failover). An unreachable node is ``{"name", "reachable": False, "error"}``."""
        from rt_appliance.nodestatus import status_document

        return status_document(self.config.stream, self.node_status(timeout_s))

    def node_status(self, timeout_s: float = 8.0) -> dict[str, Answer]:
        """``{node: its status or why it is unreachable}``, asked from this process."""
        from rt_appliance.nodestatus import gather_status

        who = self.node_names[0]  # any host of the stream may ask
        return asyncio.run(gather_status(self.config, who, timeout_s, self.node_names))

    def leader(self) -> str | None:
        """The leader the nodes name (as ``rt status`` would), None while there is none."""
        from rt_appliance.nodestatus import leader_of

        return leader_of(self.node_status())

    def wait_leader(self, timeout_s: float = 30.0, not_in: Iterable[str] = ()) -> str:
        """Wait until the nodes name a leader (one not in ``not_in``); return its name."""
        excluded = set(not_in)
        found: list[str] = []

        def elected() -> bool:
            try:
                leader = self.leader()
            except RTError:
                return False
            if leader is None or leader in excluded:
                return False
            found.append(leader)
            return True

        wait_until(
            elected,
            timeout_s,
            "a leader" + (f" other than {sorted(excluded)}" if excluded else ""),
            0.1,
        )
        return found[-1]

    # -- where the files are ----------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.config.nodes]

    def data_dir(self, host: str) -> Path:
        """The data directory of any host of the stream."""
        for h in self.config.all_hosts():
            if h.name == host:
                return self.config.data_dir_of(h)
        raise ValueError(f"no host named {host!r} in {self.config_path}")

    def merged_dir(self, node: str) -> Path:
        """Node ``node``'s merged log (what its pull server serves)."""
        return pull_source_dir(self.config, self.config.node(node))

    def merged_dirs(self, nodes: Iterable[str] | None = None) -> dict[str, Path]:
        """``{node: merged log directory}`` of ``nodes`` (default: every node)."""
        return {n: self.merged_dir(n) for n in (self.node_names if nodes is None else nodes)}

    def input_dir(self, node: str, host: str, topic: str) -> Path:
        """Node ``node``'s replica of publisher directory ``<topic>.<host>`` (``in/``)."""
        return self.data_dir(node) / "in" / publisher_dir_name(topic, host)

    def publisher_root(self, host: str) -> Path:
        """Where applications on publisher host ``host`` create their Publishers."""
        return self.config.data_dir_of(self.config.publisher(host)) / "pub"

    def publisher_dir(self, host: str, topic: str) -> Path:
        """The publisher directory ``<topic>.<host>`` the push client of ``host`` sends."""
        return self.publisher_root(host) / publisher_dir_name(topic, host)

    def subscriber_dir(self, host: str) -> Path:
        """Subscriber host ``host``'s copy of the merged log (what its pull client keeps)."""
        return replica_dir(self.config, self.config.subscriber(host))

    def logs(self, tail_chars: int = 3000) -> str:
        """The end of every daemon's log, for a failure message."""
        return "\n".join(f"--- {d.name}\n{d.log()[-tail_chars:]}" for d in self.daemons.values())
