"""The `rt` command as a user runs it: real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rt_appliance import __version__
from rt_appliance.cli.docs import render_cli_markdown
from rt_lab.testing.cluster import write_local_config
from tests.helpers import rt

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def rt_publish(
    root: Path, topic: str, stdin: str, *extra: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`rt publish --dir ROOT --topic TOPIC --host h1 EXTRA...` fed ``stdin``."""
    args = ("publish", "--dir", str(root), "--topic", topic, "--host", "h1", *extra)
    return rt(*args, stdin=stdin, check=check)


def test_version_and_help() -> None:
    assert rt("--version").stdout.strip() == f"rt, version {__version__}"
    for command in (
        ["publish"],
        ["subscribe"],
        ["log", "verify"],
        ["log", "inspect"],
        ["demo"],
        ["bench", "log"],
    ):
        out = rt(*command, "--help").stdout
        assert "Usage: rt" in out and "--help" in out


def test_cli_docs_match_the_commands() -> None:
    assert (ROOT / "docs" / "CLI.md").read_text() == render_cli_markdown(), "run `make docs`"


def test_publish_then_subscribe_round_trip(tmp_path: Path) -> None:
    lines = [f"message {i}" for i in range(500)] + ["ünïcode ✓"]
    out = rt_publish(tmp_path, "trades", "\n".join(lines) + "\n")
    assert "published 501 messages" in out.stderr
    sub = rt("subscribe", "--dir", str(tmp_path / "trades.h1"))
    messages = [json.loads(line) for line in sub.stdout.splitlines()]
    assert [m["payload"] for m in messages] == lines
    assert {m["topic"] for m in messages} == {"trades"} and {m["host"] for m in messages} == {"h1"}
    assert all(m["timestamp"].endswith("Z") and m["timestamp_ns"] > 0 for m in messages)
    # Resuming from a next_position delivers exactly the following messages.
    rest = rt(
        "subscribe", "--dir", str(tmp_path / "trades.h1"), "--from", messages[99]["next_position"]
    )
    assert [json.loads(line)["payload"] for line in rest.stdout.splitlines()] == lines[100:]
    # --from end delivers nothing new; --limit stops early.
    assert rt("subscribe", "--dir", str(tmp_path / "trades.h1"), "--from", "end").stdout == ""
    limited = rt(
        "subscribe", "--dir", str(tmp_path / "trades.h1"), "--limit", "3"
    ).stdout.splitlines()
    assert [json.loads(line)["payload"] for line in limited] == lines[:3]


def test_dedup_topic_needs_first_id(tmp_path: Path) -> None:
    bad = rt_publish(tmp_path, "q.dedup", "a\n", check=False)
    assert bad.returncode == 2 and "--first-id" in bad.stderr
    rt_publish(tmp_path, "q.dedup", "a\nb\n", "--first-id", "7")
    ids = [
        json.loads(line)["id"]
        for line in rt("subscribe", "--dir", str(tmp_path / "q.dedup.h1")).stdout.splitlines()
    ]
    assert ids == [7, 8]


def test_binary_payload_is_base64(tmp_path: Path) -> None:
    from rt_appliance import Publisher

    with Publisher(tmp_path, "bin", "h1") as pub:
        pub.publish(b"\xff\xfe\x00")
    (line,) = rt("subscribe", "--dir", str(tmp_path / "bin.h1")).stdout.splitlines()
    assert json.loads(line)["payload_base64"] == "//4A"


def test_verify_reports_and_exits_1_on_corruption(tmp_path: Path) -> None:
    rt_publish(
        tmp_path, "t", "".join(f"payload number {i}\n" for i in range(1000)), "--roll-bytes", "4KiB"
    )
    directory = tmp_path / "t.h1"
    ok = rt("log", "verify", str(directory), "--json")
    report = json.loads(ok.stdout)
    assert report["ok"] and sum(f["records"] for f in report["files"]) == 1000
    first = directory / "log.1.0"
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF  # inside the second or third record, with valid records after it
    first.write_bytes(bytes(data))
    bad = rt("log", "verify", str(directory), check=False)
    assert bad.returncode == 1
    assert "log.1.0" in bad.stdout and "CORRUPT at offset" in bad.stdout
    sub = rt("subscribe", "--dir", str(directory), check=False)
    assert sub.returncode == 1 and "log.1.0" in sub.stderr and "corrupt at offset" in sub.stderr


def test_inspect_shows_header_and_records(tmp_path: Path) -> None:
    rt_publish(tmp_path, "t", "alpha\nbeta\n")
    out = rt("log", "inspect", str(tmp_path / "t.h1" / "log.1.0")).stdout
    assert "kind publisher  session 1  roll 0" in out and "topic 't'  host 'h1'" in out
    assert "b'alpha'" in out and "b'beta'" in out and "end of file" in out


def test_errors_are_one_line(tmp_path: Path) -> None:
    missing = rt("subscribe", "--dir", str(tmp_path / "nope"), check=False)
    assert (
        missing.returncode == 1
        and missing.stderr.startswith("rt: error:")
        and "Traceback" not in missing.stderr
    )
    bad_pos = rt("subscribe", "--dir", str(tmp_path), "--from", "banana", check=False)
    assert bad_pos.returncode == 1 and "not a position" in bad_pos.stderr
    bad_size = rt(
        "publish",
        "--dir",
        str(tmp_path),
        "--topic",
        "t",
        "--roll-bytes",
        "lots",
        stdin="",
        check=False,
    )
    assert bad_size.returncode == 2 and "not a size" in bad_size.stderr


def test_demo_delivers_everything_once(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    out = rt("demo", "--single-host", "--workdir", str(work), "--duration", "2", "--rate", "2000")
    summary = json.loads((work / "summary.json").read_text())
    assert summary["published"] == 4000 and summary["delivered"] == 4000
    assert summary["missing"] == 0 and summary["duplicated"] == 0
    assert summary["verify_ok"] and summary["resume_ok"]
    assert "publisher start 2: session 2" in out.stdout
    assert os.path.isdir(summary["directory"])


def test_a_node_refuses_a_file_sync_mode_it_does_not_know(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start, not at its first raft journal sync."""
    config = write_local_config(tmp_path, nodes=1)
    monkeypatch.setenv("RT_FILE_SYNC", "sometimes")
    got = rt("node", "--config", str(config), "--node", "rt-1", check=False)
    assert got.returncode == 2
    assert got.stderr.strip() == (
        "rt: error: RT_FILE_SYNC='sometimes': expected kernel (the default) or threads"
    )
