"""The cluster demo (``rt demo``): a whole stream on loopback, with real daemons and mutual TLS.

Steps, each printed as it happens:

1. write ``rt.yaml`` for 1/3/5/7 nodes on 127.0.0.1, .2, .3 ... and make certificates;
2. start every daemon as its own process (:class:`LocalStream`): per node
   ``rt node`` (push server, sequencer and pull server); ``rt push-client`` on the
   publisher hosts pub-1 and pub-2; ``rt pull-client`` on the subscriber host sub-1;
3. wait until the sequencers elect a leader;
4. start the subscriber application: ``rt subscribe --follow`` on sub-1's copy of the
   merged log, as a separate process;
5. publish numbered messages from two publisher applications (threads here): pub-1
   topic ``trades``, pub-2 topic ``quotes``; with ``kill_leader``, SIGKILL the leader's
   sequencer halfway, time the failover (until another node leads and the merged log
   advances again) and restart the killed sequencer, which catches up by itself;
6. wait until every node's merged log and the subscriber's copy are byte-identical and
   hold every message (:func:`check_merged`), and the subscriber delivered them all;
7. ``rt status``;
8. unless ``--no-spark``: the Spark pipeline on a follower's merged log (the
   publishers send JSON trades), Parquet rows counted and per-minute VWAP printed
   (:mod:`rt_lab.demo.spark_step`);
9. write ``summary.json`` (see ``docs/DEMO.md``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rt_appliance.errors import RTError
from rt_appliance.nodestatus import Answer, NodeStatus, leader_of
from rt_appliance.publish import Publisher
from rt_lab.bench.stats import percentile
from rt_lab.testing.checkers import MergedReport, check_merged, count_delivery
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream, ports_in_use

__all__ = ["PUBLISHERS", "SUBSCRIBER", "ClusterDemoOptions", "run_cluster"]

PUBLISHERS = {"pub-1": ["trades"], "pub-2": ["quotes"]}  # publisher host -> its topic
SYMBOLS = ("ABC", "XYZ", "KLM")
SUBSCRIBER = "sub-1"
STREAM = "demo"
TICK_S = 0.01  # publishers write what is due every tick, in one batch
PROGRESS_S = 2.0  # a progress line this often while publishing

RT = (sys.executable, "-m", "rt_appliance.cli")

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ClusterDemoOptions:
    workdir: Path
    nodes: int = 3
    duration_s: float = 10.0
    rate: int = 500  # messages per second, per publisher
    kill_leader: bool = False
    spark: bool = True  # run the Spark pipeline on a node's merged log at the end
    roll_bytes: int = 64 << 10  # publisher files, small so that they roll
    ports: Literal["default", "free"] = "default"  # default: free ones if those are taken
    leader_timeout_s: float = 60.0
    settle_timeout_s: float = 90.0


class PacedPublisher(threading.Thread):
    """A publishing application: numbered messages (ids 1, 2, ...) at ``rate`` per second.

    It publishes message 1 at once and sets :attr:`opened`; the paced messages
    from 2 on follow when :attr:`go` is set (the demo waits until message 1 of
    every publisher has reached the subscriber: the whole path is live).
    """

    def __init__(self, root: Path, topic: str, host: str, rate: int, roll_bytes: int) -> None:
        super().__init__(name=f"publisher-{topic}.{host}", daemon=True)
        self.root, self.topic, self.host = root, topic, host
        self.rate, self.roll_bytes = rate, roll_bytes
        self.base_price = 100.0 if topic == "trades" else 250.0
        self.published = 0
        self.opened, self.go, self.stop_event = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        self.error: BaseException | None = None

    def _payloads(self, ids: list[int]) -> list[bytes]:
        """JSON trades: a symbol, a price walking around 100, a size."""
        return [
            json.dumps(
                {
                    "sym": SYMBOLS[i % len(SYMBOLS)],
                    "price": round(self.base_price + (i * 7919 % 400 - 200) / 100, 2),
                    "size": 100 * (1 + i % 5),
                    "seq": i,
                }
            ).encode()
            for i in ids
        ]

    def run(self) -> None:
        try:
            with Publisher(
                self.root, self.topic, self.host, fsync="batch", roll_bytes=self.roll_bytes
            ) as pub:
                pub.publish_batch(self._payloads([1]), ids=[1])
                self.published = 1
                self.opened.set()
                while not self.go.wait(TICK_S):
                    if self.stop_event.is_set():
                        return
                start = time.monotonic()
                while not self.stop_event.is_set():
                    due = int((time.monotonic() - start) * self.rate) + 1
                    ids = list(range(self.published + 1, due + 1))
                    if ids:
                        pub.publish_batch(self._payloads(ids), ids=ids)
                        self.published = ids[-1]
                    self.stop_event.wait(TICK_S)  # pacing the demo's publish rate
        except BaseException as exc:  # reported by the demo
            self.error = exc
        finally:
            self.opened.set()


@dataclass(slots=True)
class SubscriberApp:
    """``rt subscribe --follow`` on the subscriber host's copy, read by a thread."""

    directory: Path
    delivered: list[tuple[str, str, Hashable]] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*RT, "subscribe", "--dir", str(self.directory), "--follow"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the demo, which stops it
        )
        threading.Thread(target=self._read, name="subscriber", daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            received = time.time_ns()
            m = json.loads(line)
            if m["id"] > 1:  # message 1 waited for the path to come up
                self.latencies_ns.append(received - m["timestamp_ns"])
            self.delivered.append((m["topic"], m["host"], m["id"]))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass(slots=True)
class Failover:
    killed: str | None = None  # the node whose sequencer was killed
    leader_before: str | None = None
    leader_after: str | None = None
    elected_s: float | None = None  # kill -> another leader named
    failover_s: float | None = None  # kill -> another leader and the merged log advancing


def _check_daemons(stream: LocalStream, allowed: Collection[str] = ()) -> None:
    """Fail with the daemon's log if one exited that should be running."""
    for name, code in stream.exited().items():
        if name not in allowed:
            tail = stream.daemons[name].log()[-2000:]
            raise RTError(f"{name} exited with status {code}; its log ends:\n{tail}")


def _merged_seq(status: Mapping[str, Answer], skip: str | None = None) -> int:
    """The highest merged sequence among the reachable nodes (except ``skip``)."""
    seqs = [a.merged_seq for a in status.values() if isinstance(a, NodeStatus) and a.name != skip]
    return max(seqs, default=0)


def _kill_leader(stream: LocalStream, say: Say, timeout_s: float, when: str = "") -> Failover:
    """SIGKILL the leader's node process, time the failover, restart the killed node."""
    result = Failover()
    before = stream.node_status()
    leader = leader_of(before)
    if leader is None:
        say("   no leader to kill right now; skipping the failover")
        return result
    result.killed = result.leader_before = leader
    seq_before = _merged_seq(before)
    say(f"   {when}killing the leader: SIGKILL to {leader}'s process (merged seq {seq_before})")
    killed_at = time.monotonic()
    stream.kill_node(leader, signal.SIGKILL)

    def recovered() -> bool:
        try:
            status = stream.node_status()
        except RTError:
            return False
        new = leader_of(status)
        if new is None or new == leader:
            return False
        if result.elected_s is None:
            result.elected_s = time.monotonic() - killed_at
            result.leader_after = new
            say(f"   {new} leads after {result.elected_s:.2f}s")
        if _merged_seq(status, skip=leader) <= seq_before:
            return False
        result.failover_s = time.monotonic() - killed_at
        result.leader_after = new
        return True

    try:
        wait_until(recovered, timeout_s, "a new leader merging", interval_s=0.05)
        assert result.failover_s is not None
        say(f"   the merged log advances again: failover took {result.failover_s:.2f}s")
    except TimeoutError:
        say(f"   no failover within {timeout_s:g}s")
    stream.start_node(leader)
    say(f"   restarted {leader}; it catches up by itself")
    return result


def _failed(
    stream: LocalStream,
    publishers: list[PacedPublisher],
    allowed: Collection[str] = (),
    raise_: bool = False,
) -> bool:
    """Whether a daemon or a publisher failed; with ``raise_``, raise instead, saying which."""
    try:
        _check_daemons(stream, allowed)
        if errors := [p.error for p in publishers if p.error is not None]:
            raise RTError(f"a publisher failed: {errors[0]}") from errors[0]
    except RTError:
        if raise_:
            raise
        return True
    return False


def _latency_ms(latencies_ns: list[int], p: float) -> float | None:
    """The ``p``-th percentile of the latencies in ms (3 decimals), None without any."""
    return round(percentile(latencies_ns, p) / 1e6, 3) if latencies_ns else None


def _publish(
    stream: LocalStream, options: ClusterDemoOptions, app: SubscriberApp, say: Say
) -> tuple[list[PacedPublisher], Failover]:
    publishers = [
        PacedPublisher(
            stream.publisher_root(host), topics[0], host, options.rate, options.roll_bytes
        )
        for host, topics in PUBLISHERS.items()
    ]
    for p in publishers:
        say(f"   {p.host}: topic {p.topic} -> {stream.publisher_dir(p.host, p.topic)}")
        p.start()
    opened = time.monotonic()
    try:
        wait_until(
            lambda: len(app.delivered) >= len(publishers) or _failed(stream, publishers),
            options.leader_timeout_s,
            "message 1 of every publisher at the subscriber",
        )
    except BaseException:
        for p in publishers:
            p.stop_event.set()
        raise
    _failed(stream, publishers, raise_=True)
    say(
        f"   message 1 of each publisher reached the subscriber after "
        f"{time.monotonic() - opened:.2f}s: the path is live; publishing at the rate now"
    )
    for p in publishers:
        p.go.set()
    failover, killed = Failover(), False
    start = time.monotonic()
    end, halfway = start + options.duration_s, start + options.duration_s / 2
    next_progress = start + PROGRESS_S
    try:
        while (now := time.monotonic()) < end:
            if options.kill_leader and not killed and now >= halfway:
                failover = _kill_leader(
                    stream, say, options.leader_timeout_s, f"t={now - start:.1f}s "
                )
                killed = True
            elif now >= next_progress:
                published = sum(p.published for p in publishers)
                say(
                    f"   t={now - start:.1f}s published {published}, "
                    f"the subscriber delivered {len(app.delivered)}"
                )
                while next_progress <= time.monotonic():
                    next_progress += PROGRESS_S
            allowed = {f"sequencer-{failover.killed}"} if failover.killed else set()
            _failed(stream, publishers, allowed, raise_=True)
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))  # the demo's clock
    finally:
        for p in publishers:
            p.stop_event.set()
        for p in publishers:
            p.join(timeout=10)
    return publishers, failover


def run_cluster(options: ClusterDemoOptions, say: Say) -> dict[str, Any]:
    """Run the cluster demo in ``options.workdir``; returns the summary also written to
    ``summary.json``. Every process it started is stopped when it returns or raises
    (KeyboardInterrupt included)."""
    work = options.workdir
    ports = options.ports
    addresses = [f"127.0.0.{i}" for i in range(1, options.nodes + 1)]
    addresses += ["127.0.1.1", "127.0.1.2", "127.0.2.1"]
    taken = ports_in_use(addresses) if ports == "default" else []
    if taken:
        ports = "free"
    stream = LocalStream(
        work / "stream",
        options.nodes,
        PUBLISHERS,
        [SUBSCRIBER],
        {"stream": STREAM, "sequencer": {"merged_roll_bytes": "1MiB", "max_range_bytes": "256KiB"}},
        ports=ports,
    )
    p = stream.config.ports
    say(
        f"1. configuration {stream.config_path}: stream {STREAM!r}, {options.nodes} node(s) on "
        f"{addresses[0]}..{addresses[options.nodes - 1]}, publishers pub-1 (127.0.1.1) and "
        f"pub-2 (127.0.1.2), subscriber {SUBSCRIBER} (127.0.2.1)"
    )
    say(f"   certificates in {stream.config.tls.dir}: a CA and one per host (mutual TLS)")
    say(
        f"   ports: push {p.push}, pull {p.pull}, raft {p.raft}, control {p.control}"
        + (f" (the defaults {taken} are in use here)" if taken else "")
    )
    app = SubscriberApp(stream.subscriber_dir(SUBSCRIBER))
    with stream:
        try:
            return _run(stream, options, app, say)
        except KeyboardInterrupt:
            say("interrupted: stopping every process the demo started")
            raise
        finally:
            app.stop()


def _run(
    stream: LocalStream, options: ClusterDemoOptions, app: SubscriberApp, say: Say
) -> dict[str, Any]:
    say(f"2. starting the daemons, each a process (logs in {stream.log_dir})")
    stream.start()
    pids = stream.pids()
    for node in stream.node_names:
        say(f"   {node}: rt node {pids.get(f'sequencer-{node}')}")
    for host in PUBLISHERS:
        say(f"   {host}: push-client {pids.get(f'push-client-{host}')}")
    say(f"   {SUBSCRIBER}: pull-client {pids.get(f'pull-client-{SUBSCRIBER}')}")

    say("3. waiting for the sequencers to elect a leader")
    started = time.monotonic()

    def elected() -> bool:
        _check_daemons(stream)
        try:
            return stream.leader() is not None
        except RTError:
            return False

    wait_until(elected, options.leader_timeout_s, "a leader", interval_s=0.1)
    first_leader = stream.leader()
    say(f"   {first_leader} leads (after {time.monotonic() - started:.1f}s)")

    say(f"4. subscriber application: rt subscribe --dir {app.directory} --follow")
    app.start()

    say(
        f"5. publishing {options.rate} messages/s from each publisher for {options.duration_s:g}s"
        + ("; the leader's sequencer is killed halfway" if options.kill_leader else "")
    )
    publishers, failover = _publish(stream, options, app, say)
    failover.leader_before = failover.leader_before or first_leader
    expected: dict[tuple[str, str], list[Hashable]] = {
        (p.topic, p.host): list(range(1, p.published + 1)) for p in publishers
    }
    total = sum(p.published for p in publishers)
    say(
        f"   published {total}: "
        + ", ".join(f"{p.topic}.{p.host} {p.published}" for p in publishers)
    )

    say("6. waiting until every merged log and the subscriber's copy are identical and complete")
    report = check_merged(
        stream,
        expected,
        timeout_s=options.settle_timeout_s,
        copies={SUBSCRIBER: stream.subscriber_dir(SUBSCRIBER)},
    )
    say(f"   {report.describe()}".replace("\n", "\n   "))
    try:
        wait_until(lambda: len(app.delivered) >= total, options.settle_timeout_s, "deliveries")
    except TimeoutError:
        say(f"   the subscriber delivered {len(app.delivered)} of {total}")
    app.stop()
    status = _final_status(stream, say)
    spark = _spark(stream, options, status, say)
    summary = _summary(stream, options, app, expected, report, failover, status)
    summary["spark"] = spark
    summary["spark_rows"] = spark.get("rows")
    if spark.get("ran"):
        summary["ok"] = summary["ok"] and spark["rows"] == summary["published"]
    (options.workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _spark(
    stream: LocalStream, options: ClusterDemoOptions, status: dict[str, Any], say: Say
) -> dict[str, Any]:
    """Step 8: the Spark pipeline on a follower's merged log (the leader sequences)."""
    if not options.spark:
        return {"ran": False, "reason": "--no-spark"}
    leader = status.get("leader")
    node = next((n for n in stream.node_names if n != leader), stream.node_names[0])
    say(f"8. Spark: the pipeline on {node}'s merged log, then VWAP per minute")
    from rt_lab.demo.spark_step import run_spark_step

    return run_spark_step(stream.config, node, say)


def _final_status(stream: LocalStream, say: Say) -> dict[str, Any]:
    try:
        status = stream.status()
    except RTError as exc:
        say(f"   rt status failed: {exc}")
        return {}
    say("7. rt status --json, per node:")
    for n in status.get("nodes", []):
        if not n.get("reachable"):
            say(f"   {n.get('name')}: unreachable: {n.get('error')}")
            continue
        node = NodeStatus.from_dict(n)
        say(
            f"   {node.name}: {node.role}, term {node.term}, "
            f"commit index {node.commit_index}, merged seq {node.merged_seq}, "
            f"digest {str(node.digest)[:16]}"
        )
    return status


def _summary(
    stream: LocalStream,
    options: ClusterDemoOptions,
    app: SubscriberApp,
    expected: dict[tuple[str, str], list[Hashable]],
    report: MergedReport,
    failover: Failover,
    status: dict[str, Any],
) -> dict[str, Any]:
    delivery = count_delivery(app.delivered, expected)
    by_node = {n.get("name"): n for n in status.get("nodes", [])}
    status_digests = [by_node.get(n, {}).get("digest") for n in stream.node_names]
    nodes = [
        {
            "name": name,
            "merged_dir": str(stream.merged_dir(name)),
            "digest": by_node.get(name, {}).get("digest"),
            "sha256": report.digests.get(name),
            "bytes": report.logs.sizes.get(name),
            "merged_seq": by_node.get(name, {}).get("merged_seq"),
        }
        for name in stream.node_names
    ]
    identical = report.identical and (None in status_digests or len(set(status_digests)) == 1)
    per_source = delivery.as_dict()["sources"]
    summary: dict[str, Any] = {
        "stream": STREAM,
        "workdir": str(options.workdir),
        "config": str(stream.config_path),
        "nodes_count": options.nodes,
        "duration_s": options.duration_s,
        "rate_per_publisher": options.rate,
        "publishers": per_source,
        "published": delivery.published,
        "delivered": delivery.delivered,
        "missing": delivery.missing,
        "duplicated": delivery.duplicated,
        "out_of_order": delivery.out_of_order,
        "latency_ms": {
            "p50": _latency_ms(app.latencies_ns, 50),
            "p99": _latency_ms(app.latencies_ns, 99),
            "max": _latency_ms(app.latencies_ns, 100),
        },
        "merged": {
            "missing": report.missing,
            "duplicated": report.duplicated,
            "out_of_order": report.out_of_order,
            "settled": report.settled,
            "read_from": report.read_from,
            "differences": report.logs.differences,
        },
        "nodes": nodes,
        "subscriber": {
            "name": SUBSCRIBER,
            "dir": str(stream.subscriber_dir(SUBSCRIBER)),
            "sha256": report.digests.get(SUBSCRIBER),
        },
        "digests_identical": identical,
        "leader_before": failover.leader_before,
        "leader_after": status.get("leader"),
        "killed": failover.killed,
        "elected_s": _round(failover.elected_s),
        "failover_s": _round(failover.failover_s),
    }
    summary["ok"] = (
        delivery.missing == 0
        and delivery.duplicated == 0
        and delivery.out_of_order == 0
        and report.clean
        and identical
        and (not options.kill_leader or failover.failover_s is not None)
    )
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
