"""The ``rt`` data source reads exactly what the Subscriber reads, and refuses bad input
with one clear error before any task runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from rt_appliance import Position, Publisher, Subscriber
from rt_appliance.log.segments import list_files
from tests.helpers import flip_byte
from tests.integration.test_merged_log import build_merged

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def publisher_log(root: Path, sessions: int = 3, per_session: int = 400) -> Path:
    """A publisher log over several sessions and rolls: ids 1.. in order."""
    next_id = 1
    for _ in range(sessions):
        with Publisher(root, "trades", "pub-1", roll_bytes=8192) as pub:
            for _ in range(per_session):
                doc = {"sym": f"S{next_id % 3}", "price": next_id / 4, "size": next_id}
                pub.publish(json.dumps(doc).encode(), id=next_id, timestamp_ns=next_id * 1000)
                next_id += 1
    return root / "trades.pub-1"


def rows_of(df: Any) -> list[tuple[int, str, str, int, int, bytes]]:
    micros = df.selectExpr(
        "position", "topic", "host", "unix_micros(timestamp) AS us", "id", "payload"
    )
    return [
        (r.position, r.topic, r.host, r.us, r.id, bytes(r.payload))
        for r in micros.orderBy("position").collect()
    ]


def expected_rows(directory: Path, **kwargs: Any) -> list[tuple[int, str, str, int, int, bytes]]:
    return [
        (m.next_position, m.topic, m.host, m.timestamp_ns // 1000, m.id, m.payload)
        for m in Subscriber(directory).read(**kwargs)
    ]


def test_batch_read_of_a_merged_log_equals_the_subscriber(spark: Any, tmp_path: Path) -> None:
    merged, _ = build_merged(tmp_path)
    assert len(list_files(merged)) >= 2
    rows = rows_of(spark.read.format("rt").load(str(merged)))
    assert rows == expected_rows(merged)
    assert {r[1] for r in rows} == {"quotes", "trades.dedup"}


def test_batch_read_over_sessions_rolls_and_a_pruned_prefix(spark: Any, tmp_path: Path) -> None:
    log = publisher_log(tmp_path)
    files = list_files(log)
    assert len({f.session for f in files}) == 3 and len(files) > 6
    for f in files[:2]:  # the archiver or a push client pruned the oldest files
        f.path.unlink()
    df = spark.read.format("rt").load(str(log))
    assert df.rdd.getNumPartitions() == len(files) - 2  # a partition per file
    rows = rows_of(df)
    assert rows == expected_rows(log, position=Position.of(files[2].session, files[2].roll, 0))
    assert rows[0][4] > 1 and rows[-1][4] == 1200


def test_topic_filter_and_positions(spark: Any, tmp_path: Path) -> None:
    merged, _ = build_merged(tmp_path)
    messages = list(Subscriber(merged).read())
    quotes = spark.read.format("rt").option("topics", "quotes").load(str(merged))
    assert [r.id for r in quotes.orderBy("position").collect()] == [
        m.id for m in messages if m.topic == "quotes"
    ]
    start, end = messages[10].next_position, messages[40].next_position  # after 11, to 41
    window = (
        spark.read.format("rt")
        .option("startingPosition", str(start))
        .option("endingPosition", str(end))
        .load(str(merged))
    )
    assert [r.position for r in window.orderBy("position").collect()] == [
        m.next_position for m in messages[11:41]
    ]


def test_json_codec_gives_typed_columns_and_nulls_for_bad_rows(spark: Any, tmp_path: Path) -> None:
    with Publisher(tmp_path, "trades", "pub-1") as pub:
        pub.publish(b'{"sym": "A", "price": 1.5, "size": 10}')
        pub.publish(b"not json")
        pub.publish(b'{\n  "sym": "B",\n  "price": 2.5,\n  "size": 20\n}')
    df = (
        spark.read.format("rt")
        .option("codec", "json")
        .option("schema", "sym STRING, price DOUBLE, size BIGINT")
        .load(str(tmp_path / "trades.pub-1"))
    )
    assert df.columns == ["position", "topic", "host", "timestamp", "id", "sym", "price", "size"]
    got = [(r.sym, r.price, r.size) for r in df.orderBy("position").collect()]
    assert got == [("A", 1.5, 10), (None, None, None), ("B", 2.5, 20)]


def test_arrow_codec_round_trips_tables(spark: Any, tmp_path: Path) -> None:
    with Publisher(tmp_path, "bars", "pub-1") as pub:
        pub.publish_arrow(pa.table({"sym": ["A", "B"], "close": [1.0, 2.0]}))
        pub.publish_arrow(pa.table({"sym": ["C"], "close": [3.0]}))
    directory = tmp_path / "bars.pub-1"
    assert next(iter(Subscriber(directory).read())).arrow().num_rows == 2
    df = spark.read.format("rt").option("codec", "arrow").load(str(directory))
    rows = [(r.id, r.sym, r.close) for r in df.orderBy("sym").collect()]
    assert rows == [(0, "A", 1.0), (0, "B", 2.0), (0, "C", 3.0)]
    positions = [r.position for r in df.orderBy("sym").collect()]
    assert positions[0] == positions[1] < positions[2]  # one message, two rows


def error_of(action: Any) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def test_bad_input_fails_before_any_task_with_a_clear_error(spark: Any, tmp_path: Path) -> None:
    log = publisher_log(tmp_path, sessions=2, per_session=300)
    read = spark.read.format("rt")
    assert "option codec must be one of" in error_of(
        lambda: read.option("codec", "xml").load(str(log)).collect()
    )
    assert "option maxBytesPerTrigger" in error_of(
        lambda: spark.readStream.format("rt").option("maxBytesPerTrigger", "lots").load(str(log))
    )
    missing = tmp_path / "nowhere"
    assert f"{missing} is not a directory" in error_of(lambda: read.load(str(missing)).collect())
    files = list_files(log)
    pruned = Position.of(files[0].session, files[0].roll, 0)
    files[0].path.unlink()
    message = error_of(
        lambda: (
            spark.read.format("rt").option("startingPosition", str(pruned)).load(str(log)).collect()
        )
    )
    assert "was pruned" in message and pruned.format() in message
    flip_byte(files[3].path, os.path.getsize(files[3].path) // 2)
    message = error_of(lambda: spark.read.format("rt").load(str(log)).collect())
    assert "CorruptLogError" in message and str(files[3].path) in message


def test_position_is_where_a_subscriber_restarts(spark: Any, tmp_path: Path) -> None:
    log = publisher_log(tmp_path, sessions=1, per_session=50)
    last = spark.read.format("rt").load(str(log)).orderBy("position").collect()[24]
    rest = list(Subscriber(log).read(position=last.position))
    assert [m.id for m in rest] == list(range(26, 51))


def test_every_payload_size_reads_whole(spark: Any, tmp_path: Path) -> None:
    """Sizes around the read chunk and the largest payload come out as published."""
    from rt_appliance.limits import MAX_PAYLOAD_BYTES, READ_CHUNK_BYTES

    sizes = [0, 1, READ_CHUNK_BYTES - 29, READ_CHUNK_BYTES + 1, MAX_PAYLOAD_BYTES]
    payloads = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    with Publisher(tmp_path, "t", "h", fsync="never") as pub:
        for i, body in enumerate(payloads):
            pub.publish(b"before-%d" % i, id=2 * i + 1)
            pub.publish(body, id=2 * i + 2)
    rows = (
        spark.read.format("rt")
        .load(str(tmp_path / "t.h"))
        .selectExpr("id", "length(payload) AS n", "substr(payload, 1, 1) AS first")
        .orderBy("id")
        .collect()
    )
    assert [r.id for r in rows] == list(range(1, 2 * len(sizes) + 1))
    big = rows[1::2]
    assert [r.n for r in big] == sizes
    assert [bytes(r.first) for r in big] == [p[:1] for p in payloads]
