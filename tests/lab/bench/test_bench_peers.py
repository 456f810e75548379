"""rt bench peers' pure parts: the sequence check, pacing, percentiles, the report."""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path

import pytest
from click.testing import CliRunner

from rt_appliance.cli.main import cli
from rt_lab.bench.peers import ours
from rt_lab.bench.peers.driver import RunOutcome, latency_summary_ms
from rt_lab.bench.peers.report import notes, table
from rt_lab.bench.peers.runner import ROWS, PeersOptions, PeersReport, RowResult
from rt_lab.bench.peers.workload import (
    HEADER,
    PAYLOAD_BYTES,
    Receiver,
    Ticks,
    due_count,
    make_batch,
    sequence_problems,
)
from rt_lab.testing.cluster import wait_until

pytestmark = pytest.mark.unit

ROW = {r.key: r for r in ROWS}


# -- every message once, in order ------------------------------------------------------


def test_the_exact_sequence_has_no_problems() -> None:
    assert sequence_problems(range(1000), 1000) == []


def test_a_lost_message_fails_the_check() -> None:
    problems = sequence_problems([0, 1, 3, 4], 5)
    assert problems[0] == "1 lost"
    assert "2 (published #3) is missing" in problems[-1]


def test_a_duplicate_fails_the_check_even_with_the_count_right() -> None:
    problems = sequence_problems([0, 1, 1, 3], 4)  # 4 received, 4 expected
    assert problems[:2] == ["1 lost", "1 duplicated"]


def test_a_reordering_fails_the_check() -> None:
    problems = sequence_problems([0, 2, 1, 3], 4)
    assert problems[0] == "1 out of order"
    assert "1 (published #2) after a later message" in problems[-1]


def test_a_message_never_published_fails_the_check() -> None:
    assert sequence_problems([0, 1, 2, 7], 3)[0] == "1 never published"


def test_the_receiver_times_each_message_and_judges_at_the_end() -> None:
    receiver = Receiver(expected=3, latency=True)
    for payload in make_batch(0, 2) + make_batch(1, 1):  # #1 arrives twice, #2 never
        receiver.take(payload)
    assert receiver.finished  # three received: the subscriber stops
    got = receiver.result()
    assert got["received"] == 3
    assert got["problems"][:2] == ["1 lost", "1 duplicated"]
    assert got["first_ns"] <= got["last_ns"] <= time.monotonic_ns()
    assert len(got["latencies"]) == 3 * 8  # int64 each
    assert not Receiver(expected=3, latency=False).finished


def test_a_receiver_with_nothing_arriving_gives_up_after_the_stall_time() -> None:
    receiver = Receiver(expected=10, latency=False, stall_s=0.01)
    wait_until(lambda: receiver.finished, 5, "the receiver to give up")
    assert receiver.finished
    assert receiver.result()["problems"][0] == "10 lost"


def test_payloads_are_100_bytes_with_sequence_and_build_time() -> None:
    before = time.monotonic_ns()
    batch = make_batch(41, 3)
    assert [len(p) for p in batch] == [PAYLOAD_BYTES] * 3
    seqs, stamps = zip(*(HEADER.unpack_from(p) for p in batch), strict=True)
    assert seqs == (41, 42, 43)
    assert before <= stamps[0] <= stamps[2] <= time.monotonic_ns()


# -- pacing ------------------------------------------------------------------------------


def test_pacing_owes_the_first_message_at_once_then_rate_per_second() -> None:
    assert due_count(-1, 5000, 100) == 0
    assert due_count(0, 5000, 100) == 1
    assert due_count(999_999, 5000, 100) == 5  # just before 1 ms: 4.99... due, plus the first
    assert due_count(1_000_000, 5000, 100) == 6
    assert due_count(10**9, 5000, 100) == 100  # never more than the total


def test_pacing_sleeps_through_ticks_with_nothing_due() -> None:
    slow = Ticks(20, 1.0)
    assert len(slow.due()) == 1  # the first message at once
    assert 0.040 < slow.wait_s() <= 0.050  # the next is due 50 ms after the start
    assert slow.tick == 50  # the 49 ticks between are slept through
    fast = Ticks(5000, 1.0)
    fast.due()
    assert fast.wait_s() <= 0.001  # due on every tick: the next tick
    assert fast.tick == 1


# -- percentiles and medians -------------------------------------------------------------


def test_latency_summary_uses_the_shared_percentile() -> None:
    samples = [i * 1_000_000 for i in range(1, 101)]  # 1..100 ms
    p50, p99, worst = latency_summary_ms(samples)
    assert p50 == pytest.approx(50.5)  # interpolated between 50 and 51
    assert p99 == pytest.approx(99.01)
    assert worst == 100.0


def _row(key: str, *runs: RunOutcome, version: str = "X 1.0") -> RowResult:
    return RowResult(ROW[key], version, list(runs))


def test_failed_runs_are_counted_but_not_in_the_medians() -> None:
    row = _row(
        "redis-always",
        RunOutcome(True, "", 100.0, 0, 1.0, 2.0, 3.0, 0.10, 0.30),
        RunOutcome(False, "throughput: 1 lost", 10**9, 0, 0.001, 0.001, 0.001, 9.0, 9.0),
        RunOutcome(True, "", 300.0, 0, 3.0, 4.0, 5.0, 0.20, 0.50),
    )
    assert row.median("throughput") == 200.0
    assert row.median("p99_ms") == 3.0
    line = table([row]).splitlines()[2]
    assert line.startswith("| Redis Streams, AOF appendfsync always (X 1.0) | appendfsync always")
    assert line.endswith("| 200 | 2.00 | 3.00 | 4.0 | 15 | 40 | 2/3 |")
    assert row.as_dict()["median"]["cpu_servers_percent"] == pytest.approx(0.15)


def test_a_row_without_a_passing_run_says_failed_and_a_skipped_row_says_why() -> None:
    failed = _row("nats", RunOutcome(False, "the subscriber sent no ready within 60 s"))
    skipped = RowResult(ROW["rt-replication-fsync-never"], skipped="no such option")
    lines = table([failed, skipped]).splitlines()
    assert lines[2].endswith("| failed | failed | failed | failed | failed | failed | 0/1 |")
    assert lines[3].endswith("| - | - | - | - | - | - | skipped |")
    report = PeersReport([failed, skipped], kept=Path("/tmp/x"))
    text = notes(report, PeersOptions(Path("/tmp")), None, None)
    assert "NATS JetStream R3, 3 nodes, file storage, run 1: the subscriber sent no ready" in text
    assert "rt-appliance, 3 nodes, replication fsync never: skipped: no such option" in text
    assert "kept in /tmp/x" in text


def test_every_row_states_its_durability() -> None:
    assert {r.key for r in ROWS} == {
        "rt",
        "rt-replication-fsync-never",
        "nats",
        "rabbitmq",
        "redis-always",
        "redis-everysec",
    }
    header = table([]).splitlines()[0]
    assert header == (
        "| system | durability | throughput msg/s | p50 ms | p99 ms | max ms "
        "| servers' CPU % | applications' CPU % | runs ok |"
    )
    assert all(r.durability for r in ROWS)
    assert "raft journal synced" in ROW["rt"].durability


def test_the_notes_link_the_plot_from_the_document_and_say_what_is_not_plotted() -> None:
    ours_row = _row("rt", RunOutcome(True, "", 1.0, 0, 1.0, 1.0, 1.0))
    peer = _row("rabbitmq", RunOutcome(True, "", 1.0, 0, 1.0, 1.0, 1.0))
    peer.samples_ns = [1_000_000]
    text = notes(
        PeersReport([ours_row, peer]),
        PeersOptions(Path("/tmp")),
        Path("docs/latency-cdf.png"),
        Path("docs/BENCHMARKS.md"),
    )
    assert "![Latency CDF at 5,000 msg/s](latency-cdf.png)" in text
    assert "Not plotted: rt-appliance, 3 nodes (durable default)" in text


# -- our stream's run --------------------------------------------------------------------


def test_our_stream_gets_the_same_total_from_two_publishers() -> None:
    argv = ours.cluster_command(200_000, 5000, 10.0, Path("/w"), ["--replication-fsync", "never"])
    assert argv[argv.index("--messages") + 1] == "100000"
    assert argv[argv.index("--latency-rate") + 1] == "5000"
    assert argv[argv.index("--latency-seconds") + 1] == "10"
    assert argv[argv.index("--memory-messages") + 1] == "0"
    assert argv[-2:] == ["--replication-fsync", "never"]
    assert "--json" in argv and argv[argv.index("--runs") + 1] == "1"
    assert "--latency-samples" not in argv


def test_our_latencies_come_back_one_by_one(tmp_path: Path) -> None:
    samples = tmp_path / "samples.bin"
    argv = ours.cluster_command(2000, 1000, 1.0, tmp_path, [], samples)
    assert argv[argv.index("--latency-samples") + 1] == str(samples)
    assert ours.read_samples(samples) == []  # no latency run wrote it
    samples.write_bytes(array("q", [1_500_000, 2_000_000, 900_000]).tobytes())
    assert ours.read_samples(samples) == [1_500_000, 2_000_000, 900_000]


def test_our_figures_are_read_from_the_cluster_bench_json() -> None:
    results = [
        {"name": "end-to-end throughput, 2 publishers -> subscriber", "median": 2e5, "runs": [2e5]},
        {"name": "publish rate during that run (2 publishers)", "median": 8e5, "runs": [8e5]},
        {"name": "publish-to-subscriber latency p50 at 5,000 msg/s", "median": 60, "runs": [60]},
        {"name": "publish-to-subscriber latency p99 at 5,000 msg/s", "median": 99, "runs": [99]},
        {"name": "publish-to-subscriber latency max at 5,000 msg/s", "median": 120, "runs": [120]},
        {"name": "CPU of the 3 nodes' processes at 5,000 msg/s", "median": 95, "runs": [95]},
        {"name": "CPU of the push and pull client daemons at 5,000", "median": 0, "runs": [0]},
        {"name": "CPU of the 3 applications at 5,000 msg/s", "median": 50, "runs": [50]},
    ]
    assert ours.parse_cluster_json(json.dumps(results)) == {
        "throughput": 2e5,
        "p50": 60.0,
        "p99": 99.0,
        "max": 120.0,
        "cpu_nodes": 95.0,
        "cpu_clients": 0.0,
        "cpu_apps": 50.0,
    }
    assert ours.parse_cluster_json(json.dumps(results[:1])) == {"throughput": 2e5}


def test_only_accepts_the_known_systems() -> None:
    # through `rt` itself: invoked on its own, click would build (and keep) the command's
    # help option without rt's -h
    done = CliRunner().invoke(cli, ["bench", "peers", "--only", "nats,kafka"])
    assert done.exit_code == 2
    assert "choose from nats,rabbitmq,redis,rt" in done.output
