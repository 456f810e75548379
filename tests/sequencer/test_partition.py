"""A minority partition (as root): the majority keeps merging, the cut node stops, and after
healing every merged log is identical. Each node is its own network namespace."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.config import load_config
from rt_appliance.log.segments import list_files
from rt_appliance.nodestatus import NodeStatus, gather_status
from rt_lab.testing.checkers import assert_clean, check_merged
from rt_lab.testing.cluster import Daemon, wait_until, write_local_config
from rt_lab.testing.netns import NetnsHost, enable_forwarding, restore_forwarding
from tests.sequencer.conftest import SMALL

pytestmark = [pytest.mark.fault, pytest.mark.root, pytest.mark.slow]


@pytest.fixture
def namespaces() -> Iterator[list[NetnsHost]]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for network namespaces")
    before = enable_forwarding()
    hosts: list[NetnsHost] = []
    try:
        for tag in (1, 2, 3):
            hosts.append(NetnsHost(10 + tag))
            hosts[-1].route_via_host()
        yield hosts
    finally:
        for h in hosts:
            h.close()
        restore_forwarding(before)


def _merged_bytes(directory: Path) -> int:
    return sum(f.path.stat().st_size for f in list_files(directory))


def test_minority_partition_then_heal(tmp_path: Path, namespaces: list[NetnsHost]) -> None:
    nodes = [{"name": f"rt-{i}", "host": ns.address} for i, ns in enumerate(namespaces, 1)]
    extra = {
        **SMALL,
        "nodes": nodes,
        "replication": {
            "ack_timeout_ms": 1000,
            "reconnect_initial_ms": 50,
            "reconnect_max_ms": 500,
        },
    }
    path = write_local_config(tmp_path, publishers={"pub-1": ["trades"]}, extra=extra)
    config = load_config(path)
    logs = tmp_path / "logs"
    daemons: list[Daemon] = []
    try:
        for ns, node in zip(namespaces, config.nodes, strict=True):
            args = ["node", "--config", str(path), "--node", node.name]
            daemons.append(Daemon(f"sequencer-{node.name}", args, logs, ns.prefix).start())
        for role, host in (("push-client", "pub-1"), ("pull-client", "sub-1")):
            args = [role, "--config", str(path), "--host", host]
            daemons.append(Daemon(f"{role}-{host}", args, logs).start())
        from rt_appliance.publish import Publisher

        root = config.data_dir_of(config.publisher("pub-1")) / "pub"
        ids: list[int] = []

        def publish(first: int, last: int) -> None:
            with Publisher(root, "trades", "pub-1", roll_bytes=256 << 10) as pub:
                batch = list(range(first, last + 1))
                pub.publish_batch([b"m-%d" % i for i in batch], ids=batch)
            ids.extend(batch)

        merged = {n.name: config.data_dir_of(n) / "merged" for n in config.nodes}
        every_log = "\n".join(d.log()[-2000:] for d in daemons)
        publish(1, 3000)
        assert_clean(check_merged(merged, {("trades", "pub-1"): ids}, timeout_s=60), every_log)

        namespaces[0].cut()  # rt-1 alone: a minority of one
        size_at_cut = _merged_bytes(merged["rt-1"])
        publish(3001, 6000)
        majority = {k: v for k, v in merged.items() if k != "rt-1"}
        report = check_merged(majority, {("trades", "pub-1"): ids}, timeout_s=60)
        assert_clean(report, "\n".join(d.log()[-2000:] for d in daemons))
        assert _merged_bytes(merged["rt-1"]) == size_at_cut, "the minority merged without quorum"

        namespaces[0].heal()
        report = check_merged(merged, {("trades", "pub-1"): ids}, timeout_s=90)
        assert_clean(report, "\n".join(d.log()[-3000:] for d in daemons))
    finally:
        for d in daemons:
            d.stop()


def test_a_follower_cut_off_and_back_leaves_the_leader_in_place(
    tmp_path: Path, namespaces: list[NetnsHost]
) -> None:
    """A follower cut off for several election timeouts asks before it stands (pre-vote):
    nobody it can reach would vote for it, so its term stays, and once back it follows
    the leader it left instead of making it step down (raft's term rule)."""
    nodes = [{"name": f"rt-{i}", "host": ns.address} for i, ns in enumerate(namespaces, 1)]
    path = write_local_config(tmp_path, publishers={"pub-1": ["trades"]}, extra={"nodes": nodes})
    config = load_config(path)
    names = [n.name for n in config.nodes]

    def terms() -> dict[str, tuple[str | None, int]]:
        answers = asyncio.run(gather_status(config, names[0], 5.0, names))
        return {k: (a.leader, a.term) for k, a in answers.items() if isinstance(a, NodeStatus)}

    logs = tmp_path / "logs"
    daemons = []
    try:
        for ns, node in zip(namespaces, config.nodes, strict=True):
            args = ["node", "--config", str(path), "--node", node.name]
            daemons.append(Daemon(f"sequencer-{node.name}", args, logs, ns.prefix).start())
        seen: list[dict[str, tuple[str | None, int]]] = []

        def agreed() -> bool:
            now = terms()
            seen[:] = [now]
            return len(now) == 3 and len(set(now.values())) == 1 and now[names[0]][0] is not None

        wait_until(agreed, 60, "three nodes agreeing on a leader")
        ((leader, term),) = set(seen[0].values())
        assert leader is not None
        follower = next(n for n in names if n != leader)
        cut = namespaces[names.index(follower)]

        cut.cut()
        time.sleep(4.0)  # several election timeouts and the peers' 3 s timeout, cut off
        cut.heal()

        def back() -> bool:
            now = terms()
            seen[:] = [now]
            return len(now) == 3 and now[follower][0] is not None

        wait_until(back, 30, f"{follower} following a leader again")
        watch_until = time.monotonic() + 2.0  # two election timeouts: a needless one shows
        while time.monotonic() < watch_until:
            after = terms()
            every_log = "\n".join(d.log()[-3000:] for d in daemons)
            assert after == {n: (leader, term) for n in names}, (after, every_log)
    finally:
        for d in daemons:
            d.stop()


def test_a_follower_whose_packets_are_lost_is_back_in_step_soon_after(
    tmp_path: Path, namespaces: list[NetnsHost]
) -> None:
    """A follower that receives but cannot send (one-way loss) for several seconds: the
    leader's connection to it sees nothing acknowledged. Raft connections drop once what
    they sent goes unacknowledged for an election timeout, and dials give up after as
    long, so both sides dial afresh every second: once the loss ends, the follower
    commits what the leader had within about a second, not after TCP's doubling
    retransmission wait (6.4 s here without the limits)."""
    nodes = [{"name": f"rt-{i}", "host": ns.address} for i, ns in enumerate(namespaces, 1)]
    path = write_local_config(
        tmp_path, publishers={"pub-1": ["trades"]}, extra={**SMALL, "nodes": nodes}
    )
    config = load_config(path)
    names = [n.name for n in config.nodes]

    def status() -> dict[str, NodeStatus]:
        answers = asyncio.run(gather_status(config, names[0], 5.0, names))
        return {k: a for k, a in answers.items() if isinstance(a, NodeStatus)}

    logs = tmp_path / "logs"
    daemons: list[Daemon] = []
    stop = threading.Event()
    try:
        for ns, node in zip(namespaces, config.nodes, strict=True):
            args = ["node", "--config", str(path), "--node", node.name]
            daemons.append(Daemon(f"sequencer-{node.name}", args, logs, ns.prefix).start())
        args = ["push-client", "--config", str(path), "--host", "pub-1"]
        daemons.append(Daemon("push-client-pub-1", args, logs).start())
        seen: dict[str, NodeStatus] = {}

        def led() -> bool:
            seen.clear()
            seen.update(status())
            return len(seen) == 3 and all(s.leader is not None for s in seen.values())

        wait_until(led, 60, "three nodes following a leader")
        leader = next(iter(seen.values())).leader
        follower = next(n for n in names if n != leader)
        root = config.data_dir_of(config.publisher("pub-1")) / "pub"
        ids: list[int] = []

        def publish() -> None:  # 200 msg/s: the leader sends appends all the time
            from rt_appliance.publish import Publisher

            with Publisher(root, "trades", "pub-1") as pub:
                while not stop.wait(0.05):
                    batch = list(range(len(ids) + 1, len(ids) + 11))
                    pub.publish_batch([b"m-%d" % i for i in batch], ids=batch)
                    pub.flush()
                    ids.extend(batch)

        feed = threading.Thread(target=publish, daemon=True)
        feed.start()
        wait_until(lambda: led() and seen[follower].committed_seq > 10, 30, "merging")
        cut = namespaces[names.index(follower)]
        cut.drop_outgoing()
        time.sleep(7.0)  # the fault: the leader's retransmissions are 3.2 s apart by now
        cut.restore_outgoing()
        healed = time.monotonic()
        target = status()[str(leader)].committed_seq

        def caught_up() -> bool:
            answer = status().get(follower)
            return answer is not None and answer.committed_seq >= target

        wait_until(caught_up, 30, f"{follower} committing what {leader} had")
        took = time.monotonic() - healed
        every_log = "\n".join(d.log()[-3000:] for d in daemons)
        assert took < 3.0, f"{follower} took {took:.1f} s to catch up\n{every_log}"
        print(f"{follower} back in step {took:.2f} s after the loss ended")
        stop.set()
        feed.join(10)
        merged = {n.name: config.data_dir_of(n) / "merged" for n in config.nodes}
        report = check_merged(merged, {("trades", "pub-1"): ids}, timeout_s=60)
        assert_clean(report, every_log)
    finally:
        stop.set()
        for d in daemons:
            d.stop()
