"""Holds: the archiver keeps what a node's pipeline has not committed, on every node, unless
the disk limit forces it; then the gap is reported by ``rt status`` and by the source."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import StructType

from rt_appliance import Position, PositionPrunedError
from rt_appliance.log.segments import list_files
from rt_appliance.sequencer.holds import hold_path, write_hold
from rt_appliance.spark.datasource import RtDataSource
from rt_lab.testing.cluster import wait_until
from tests.sequencer.conftest import SMALL, Feed

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def history(stream: Any, node: str) -> list[dict[str, Any]]:
    path = stream.data_dir(node) / "log-history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def oldest_roll(stream: Any, node: str) -> int:
    """The oldest merged roll on ``node`` (-1 before its first merged file)."""
    files = list_files(stream.merged_dir(node))
    return files[0].roll if files else -1


def publish_megabytes(stream: Any, megabytes: int) -> None:
    feed = Feed(stream, "pub-1", "trades", roll_bytes=256 << 10)
    feed.payload_bytes = 200
    feed.publish(1, megabytes * 4500)


def test_a_follower_hold_caps_the_archiver_until_it_moves(local_stream) -> None:  # type: ignore[no-untyped-def]
    extra = {**SMALL, "archiver": {"interval_ms": 200, "max_log_bytes": "2MiB"}}
    stream = local_stream(nodes=3, publishers={"pub-1": ["trades"]}, extra=extra).start()
    leader = stream.wait_leader()
    follower = next(n for n in stream.node_names if n != leader)
    hold = hold_path(stream.data_dir(follower), "spark-pipeline")
    write_hold(hold, Position.of(1, 1, 0))  # committed everything before merged roll 1
    publish_megabytes(stream, 7)

    def pruned_up_to_hold() -> bool:
        return all(
            h and h[-1]["pruned_below_roll"] == 1
            for h in map(lambda n: history(stream, n), stream.node_names)
        )

    wait_until(pruned_up_to_hold, 120, "a prune below the hold's roll on every node")
    wait_until(
        lambda: max(f.roll for f in list_files(stream.merged_dir(leader))) >= 6, 60, "7 files"
    )
    assert all(e["pruned_below_roll"] == 1 for n in stream.node_names for e in history(stream, n))
    write_hold(hold, Position.of(1, 4, 0))  # the pipeline committed up to roll 4

    def moved() -> bool:  # the files go first, then the log-history line
        found = [history(stream, n) for n in stream.node_names]
        return all(h and h[-1]["pruned_below_roll"] == 4 for h in found)

    wait_until(moved, 60, "a prune up to the moved hold on every node")
    assert all(oldest_roll(stream, n) == 4 for n in stream.node_names)
    # the size rule alone would cut further (7 files of 1 MiB, 2 MiB allowed): the hold capped it
    last = history(stream, leader)[-1]
    assert last["pruned_below_roll"] == 4 and "up to the hold at roll 4" in last["reason"]
    assert all(e["pruned_below_roll"] <= 4 for n in stream.node_names for e in history(stream, n))


def test_the_disk_limit_overrides_a_hold_and_the_gap_is_reported(
    local_stream,
) -> None:  # type: ignore[no-untyped-def]
    extra = {**SMALL, "archiver": {"interval_ms": 200, "max_disk_usage_percent": 0.001}}
    stream = local_stream(nodes=1, publishers={"pub-1": ["trades"]}, extra=extra).start()
    stream.wait_leader()
    write_hold(hold_path(stream.data_dir("rt-1"), "spark-pipeline"), Position.of(1, 0, 0))
    publish_megabytes(stream, 4)
    wait_until(  # the files go first, then the log-history line
        lambda: oldest_roll(stream, "rt-1") >= 2 and history(stream, "rt-1"),
        120,
        "the disk rule pruning past the hold",
    )
    entry = history(stream, "rt-1")[0]
    assert "overriding the hold at roll 0" in entry["reason"]
    status = stream.status()
    gap = status["nodes"][0]["holds"]["spark-pipeline"]["gap"]
    assert gap.startswith("merged rolls 0..") and "spark-pipeline" in gap
    # the pipeline's source refuses to go on from its committed position, naming the gap
    source = RtDataSource({"path": str(stream.merged_dir("rt-1"))})
    schema = StructType.fromJson(json.loads(_RAW_SCHEMA))
    reader = source.streamReader(schema)
    with pytest.raises(PositionPrunedError, match="pruned before it read them"):
        reader.latestOffset({"position": int(Position.of(1, 0, 0))}, ReadAllAvailable())


_RAW_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": False, "metadata": {}}
            for n, t in [
                ("position", "long"),
                ("topic", "string"),
                ("host", "string"),
                ("timestamp", "timestamp"),
                ("id", "long"),
                ("payload", "binary"),
            ]
        ],
    }
)
