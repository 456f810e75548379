"""What the raft transport needs to know of the stream: names, addresses, the journal,
refusal counters, and how to ask raft for a tick."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

from pysyncobj.node import Node, TCPNode

from rt_appliance import trace
from rt_appliance.config.model import HostRole, NodeConfig, StreamConfig
from rt_appliance.limits import (
    RAFT_LEADER_FALLBACK_MIN_S,
    RAFT_PEER_TIMEOUT_MIN_S,
    RAFT_QUIET_ANSWERS_PER_FALLBACK,
    RAFT_UNACKED_MIN_S,
)
from rt_appliance.sequencer.raft.journal import JOURNALS, SyncedJournal

__all__ = ["Link", "address", "leader_fallback_s"]

log = logging.getLogger(__name__)


def leader_fallback_s(config: StreamConfig) -> float:
    """How long a leader that hears from no majority keeps leading (pysyncobj's
    ``leaderFallbackTimeout``): twice the longest election timeout, at least
    ``RAFT_LEADER_FALLBACK_MIN_S``."""
    return max(config.sequencer.raft_max_timeout_ms / 1000 * 2, RAFT_LEADER_FALLBACK_MIN_S)


class Link:
    """What the transport needs to know: names, addresses, the journal, counters."""

    def __init__(self, config: StreamConfig, name: str, journal_path: str) -> None:
        self.config, self.name, self.journal_path = config, name, journal_path
        me = config.node(name)
        self.listen = (me.host, config.ports.raft)
        self.timeout_s = max(
            RAFT_PEER_TIMEOUT_MIN_S, config.sequencer.raft_max_timeout_ms / 1000 * 3
        )
        # sent bytes unacknowledged this long: the connection is dropped and dialled again
        self.unacked_s = max(RAFT_UNACKED_MIN_S, config.sequencer.raft_max_timeout_ms / 1000)
        # a follower in step repeats a heartbeat's answer no sooner than this (Peer.repeats)
        self.quiet_answer_s = min(
            config.sequencer.raft_min_timeout_ms / 1000,
            leader_fallback_s(config) / RAFT_QUIET_ANSWERS_PER_FALLBACK,
        )
        self.by_address = {address(config, n): n for n in config.nodes}
        self.refusals: collections.Counter[str] = collections.Counter()
        self.on_refused: Callable[[str], None] | None = None
        self.kick: Callable[[], None] = lambda: None  # a tick soon: something happened
        self.failure: BaseException | None = None  # a journal sync failed: the node must stop

    def name_of(self, node: Node) -> str:
        return self.by_address[node.id].name

    def node_named(self, name: str) -> Node | None:
        if name == self.name or self.config.role_of(name) is not HostRole.NODE:
            return None
        return TCPNode(address(self.config, self.config.node(name)))

    def journal(self) -> SyncedJournal | None:
        return JOURNALS.get(self.journal_path)

    def fail(self, exc: BaseException) -> None:
        """A journal sync failed. After a failed fsync the kernel may have dropped the
        pages it could not write, so a later sync that succeeds proves nothing: the node
        sends nothing more and stops, and restarts from what its journal holds."""
        if self.failure is None:
            self.failure = exc
            log.critical("raft: syncing the journal failed (%s); this node stops", exc)

    def sync_journal_through(self, index: int) -> None:
        """Make sure raft entries up to ``index`` are on disk (syncing now if not yet)."""
        journal = self.journal()
        if journal is not None and journal.synced_index < index:
            try:
                journal.sync()
            except OSError as exc:
                self.fail(exc)
                raise
            trace.event("jsynced", self.name, journal.synced_index)

    def refused(self, what: str, detail: str) -> None:
        self.refusals[what] += 1
        log.warning("raft: refused %s: %s", what, detail)
        if self.on_refused is not None:
            self.on_refused(what)


def address(config: StreamConfig, node: NodeConfig) -> str:
    return f"{node.host}:{config.ports.raft}"
