"""``rt node``: an RT node's push server, sequencer and pull server in one process.

A message crosses a node without leaving the process: the push server syncs a chunk
of an input and tells the sequencer at once (the report to the leader and the
planner go out on the same loop turn, with the extent the push server knows, no
directory walk, no second sync); raft's apply of a merge that carries its input builds
the merged record and hands it to the pull server, whose streaming connections send it
at once from memory (``replicate/fresh.py``), while the merger writes it; the merger's
writes wake them for the rest. No inotify on the path.

Who owns what (one owner each):

=====================  ===================================================
the event loop          the push server (connections, replicas), the pull
                        server (connections, small tail reads), raft
                        (pysyncobj, ticked by the sequencer on this loop,
                        its TLS connections, ``apply``, which builds the
                        record of a merge carrying its input), the newest
                        committed records kept for the pull connections
                        (``replicate/fresh.py``), the sequencer's control
                        channel, reporter, planner loop, archiver and
                        observer
the merger thread       the merged log's writes and syncs (it wakes the pull
                        server after each write, before the sync)
the kernel              raft's journal syncs, started and settled by the
                        loop (transport/filesync.py)
offload threads         the push server's syncs, and raft's journal syncs
                        where the kernel does not take them
                        (transport/offload.py); they own nothing between
                        calls
worker threads          what else the loop hands off and awaits: a planner
                        step that reads 64 KiB or more, large reads; they
                        own nothing between calls
the fetcher's loop      FETCH connections to peers, for the merger's repairs
the metrics thread      the HTTP endpoint, reading the registries
=====================  ===================================================

Ports and mutual TLS are those of the three daemons it replaces: push (5002), pull
(5001), raft, control; one metrics endpoint on ``ports.sequencer_metrics`` carries
all three sets of metrics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from rt_appliance.config.model import StreamConfig
from rt_appliance.daemons.runner import serve_metrics
from rt_appliance.replicate.pull_server import PullServer, ServerMetrics
from rt_appliance.replicate.push_server import PushServer
from rt_appliance.sequencer.daemon import Sequencer
from rt_appliance.sequencer.fitness import is_write_failure

__all__ = ["Node"]

log = logging.getLogger(__name__)


class _Registries:
    """Several registries read as one (a collector of a registry of its own)."""

    def __init__(self, registries: Iterable[CollectorRegistry]) -> None:
        self._registries = list(registries)

    def collect(self) -> Iterator[Metric]:
        for registry in self._registries:
            yield from registry.collect()


class Node:
    """Node ``name``'s three servers on one event loop; :meth:`run` until cancelled."""

    def __init__(self, config: StreamConfig, name: str, metrics_port: int | None) -> None:
        self.config, self.name = config, name
        self.metrics_port = config.ports.sequencer_metrics if metrics_port is None else metrics_port
        self.push = PushServer(
            config,
            name,
            on_synced=self._input_synced,
            on_write_failure=self._input_unwritten,
            on_written=self._input_written,
            later=self._input_later,
        )
        self.sequencer = Sequencer(
            config,
            name,
            0,
            held=self.push.held,
            written=self.push.written,
            ended=self.push.file_end,
            known=self.push.names,
        )
        self.pull = PullServer(config, name, ServerMetrics(), watch=False)
        self.sequencer.merger.on_progress = self.pull.changed
        self.sequencer.machine.on_record = self.pull.fresh_record
        self.registry = CollectorRegistry()
        parts = [self.sequencer.metrics.registry, self.push.metrics.registry]
        self.registry.register(_Registries([*parts, self.pull.metrics.registry]))
        self.ready = asyncio.Event()

    def _input_synced(self) -> None:
        self.sequencer.input_synced()

    def _input_written(self) -> None:
        self.sequencer.input_written()

    def _input_later(self) -> bool:
        return self.sequencer.input_later()

    def _input_unwritten(self, exc: BaseException) -> None:
        if is_write_failure(exc):  # a full disk, EIO: not a publisher's bad frame
            self.sequencer.fitness.failed("input", str(exc))

    def status_line(self) -> str:
        """One line for systemd's status: the sequencer's, then the servers'."""
        return (
            f"{self.sequencer.status_line()}; {self.push.status_line()}; {self.pull.status_line()}"
        )

    async def run(self) -> None:
        serve_metrics(self.registry, self.config.node(self.name).host, self.metrics_port)
        stop = asyncio.Event()
        await self.pull.start()
        try:
            push = asyncio.create_task(self.push.run(stop), name="push-server")
            sequencer = asyncio.create_task(self.sequencer.run(), name="sequencer")
            ready = asyncio.create_task(self._announce_ready(), name="node-ready")
            tasks = [push, sequencer]
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # what ended it ends the node: systemd restarts it whole
            finally:
                ready.cancel()
                stop.set()
                sequencer.cancel()
                await asyncio.gather(push, sequencer, ready, return_exceptions=True)
        finally:
            await self.pull.stop()

    async def leave(self) -> None:
        """Before a clean stop: hand leadership over (the servers serve meanwhile)."""
        await self.sequencer.hand_over()

    async def _announce_ready(self) -> None:
        await self.push.ready.wait()
        await self.sequencer.ready.wait()
        await self.pull.ready.wait()
        self.ready.set()
