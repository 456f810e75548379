"""`rt validate` and `rt config schema`: every rule refuses with its line and field, exit 2.

Each case is run through the real entry point (`rt_appliance.cli.main.main`), as
`rt validate FILE` would be, and also through `rt apply --root`, which must then
write nothing at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from rt_appliance.cli.main import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

BASE = """\
stream: s1
nodes:
  - name: rt-1
    host: 127.0.0.1
publishers:
  - name: pub-1
    topics: [trades]
"""


def run_rt(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `rt ARGS` in this process; its exit status, stdout and stderr."""
    argv = sys.argv
    sys.argv = ["rt", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return code, out.out, out.err


# (text appended to or replacing parts of BASE, the line, the field path, part of the message)
CASES = [
    (BASE + "colour: blue\n", 8, "colour", "Extra inputs are not permitted"),
    (BASE.replace("stream: s1", "stream: bad name"), 1, "stream", "invalid stream name"),
    (
        BASE.replace("  - name: rt-1\n    host: 127.0.0.1\n", "  - name: rt-1\n    host: a\n" * 2),
        2,
        "nodes",
        "1, 3, 5 or 7 nodes, not 2",
    ),
    (BASE.replace("pub-1", "rt-1"), 6, "publishers.0.name", "used twice"),
    (BASE.replace("[trades]", "[trades, 'no way']"), 7, "publishers.0.topics", "'no way'"),
    (BASE.replace("[trades]", "[trades, trades]"), 7, "publishers.0.topics", "listed twice"),
    (BASE.replace("host: 127.0.0.1", "host: bad host"), 4, "nodes.0.host", "bad host"),
    (BASE + "ports:\n  pull: 70000\n", 9, "ports.pull", "less than or equal to 65535"),
    (BASE + "replication:\n  max_frame_bytes: lots\n", 9, "replication.max_frame_bytes", "size"),
    (BASE + "replication:\n  max_frame_bytes: 1KiB\n", 9, "replication.max_frame_bytes", "64KiB"),
    # limits that must agree: a frame the default MemoryMax of a role cannot hold
    (
        BASE + "replication:\n  max_frame_bytes: 64MiB\n",
        9,
        "replication.max_frame_bytes",
        "too large for appliance.units.push_client.memory_max",
    ),
    (
        BASE + "appliance:\n  units:\n    pull_client:\n      memory_max: 64MiB\n",
        11,
        "appliance.units.pull_client.memory_max",
        "too small: the process needs 128.0 MiB plus up to 8 frames of replication.max_frame_bytes",
    ),
    (
        BASE + "appliance:\n  units:\n    sequencer:\n      memory_max: 200MiB\n",
        11,
        "appliance.units.sequencer.memory_max",
        "copies of a record of the largest payload (64MiB)",
    ),
    (
        BASE + "replication:\n  reconnect_initial_ms: 10\n  reconnect_max_ms: 5\n",
        10,
        "replication.reconnect_max_ms",
        "at least reconnect_initial_ms",
    ),
    (
        BASE + "sequencer:\n  raft_min_timeout_ms: 100\n",
        9,
        "sequencer.raft_min_timeout_ms",
        "3 x append_entries_period_ms",
    ),
    (
        BASE + "sequencer:\n  merged_roll_bytes: 100MiB\n  max_range_bytes: 50MiB\n",
        10,
        "sequencer.max_range_bytes",
        "merged_roll_bytes / 4",
    ),
    (BASE + "load_balancer: nohost\n", 8, "load_balancer", "host:port"),
    (BASE + "data_dir: var/rt\n", 8, "data_dir", "absolute path"),
    (
        BASE.replace("    topics:", "    tls_dir: tls\n    topics:"),
        7,
        "publishers.0.tls_dir",
        "absolute",
    ),
    (BASE + "appliance:\n  user: Root User\n", 9, "appliance.user", "system account name"),
    (BASE + "appliance:\n  prefix: opt/rt\n", 9, "appliance.prefix", "absolute path"),
    (
        BASE + "appliance:\n  units:\n    sequencer:\n      watchdog_s: 1\n",
        11,
        "appliance.units.sequencer.watchdog_s",
        "greater than or equal to 2",
    ),
    (
        BASE + "appliance:\n  units:\n    push_client:\n      memory_max: plenty\n",
        11,
        "appliance.units.push_client.memory_max",
        "not a size",
    ),
    (
        BASE + "appliance:\n  units:\n    sequencer:\n      cpu_weight: 0\n",
        11,
        "appliance.units.sequencer.cpu_weight",
        "greater than or equal to 1",
    ),
    (BASE + "appliance:\n  units:\n    spark: {}\n", 10, "appliance.units.spark", "Extra inputs"),
    (
        BASE + "appliance:\n  units:\n    push_server:\n      cpu_weight: 200\n",
        9,
        "appliance.units",
        "push_server: a node runs one unit now, rt-sequencer.service",
    ),
    (BASE + "spark:\n  master: yarn\n", 9, "spark.master", "local[*] or spark://host:port"),
    (BASE + "spark:\n  transform: vwap\n", 9, "spark.transform", "module:function"),
    (
        BASE + "spark:\n  enabled: true\n  codec: json\n",
        8,
        "spark.schema",
        "codec json needs schema",
    ),
    (
        BASE + "spark:\n  worker:\n    enabled: true\n    cores: 4\n",
        9,
        "spark.worker.master_url",
        "a worker needs master_url",
    ),
    (
        BASE + "spark:\n  worker:\n    master_url: http://m:7077\n",
        10,
        "spark.worker.master_url",
        "spark://host:port",
    ),
    (
        BASE + "spark:\n  conf:\n    spark.ui.enabled: 'false'\n    executor.memory: 1g\n",
        9,
        "spark.conf",
        "(spark.*), got 'executor.memory'",
    ),
    (BASE + "spark:\n  java_home: jvm\n", 9, "spark.java_home", "absolute path"),
    (BASE + "spark:\n  output_dir: out\n", 9, "spark.output_dir", "absolute path"),
    (BASE + "spark:\n  memory: 100MiB\n", 9, "spark.memory", "at least 256MiB"),
    (BASE + "nodes: [unclosed\n", 9, None, "not valid YAML"),
    ("- a\n- list\n", 1, None, "must be a mapping"),
]


@pytest.mark.parametrize(("text", "line", "field", "message"), CASES)
def test_rule_refuses_with_line_and_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    line: int,
    field: str | None,
    message: str,
) -> None:
    config = tmp_path / "rt.yaml"
    config.write_text(text)
    code, out, err = run_rt(["validate", str(config)], capsys)
    assert code == 2 and out == ""
    prefix = f"{config}:{line}: " + (f"{field}: " if field else "")
    assert any(ln.startswith(prefix) and message in ln for ln in err.splitlines()), err
    assert "Traceback" not in err

    root = tmp_path / "root"
    code, _, err = run_rt(
        ["apply", "--config", str(config), "--host", "rt-1", "--root", str(root)], capsys
    )
    assert code == 2 and prefix in err
    assert not root.exists()  # nothing written


def test_every_problem_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "rt.yaml"
    config.write_text(BASE + "ports:\n  pull: 0\nreplication:\n  fsync: sometimes\nextra: 1\n")
    code, _, err = run_rt(["validate", "--config", str(config)], capsys)
    assert code == 2
    assert f"{config}:9: ports.pull:" in err
    assert f"{config}:11: replication.fsync:" in err
    assert f"{config}:12: extra:" in err
    assert "3 problem(s)" in err


def test_valid_file_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_rt(["validate", str(ROOT / "etc" / "rt.yaml")], capsys)
    assert code == 0
    assert "valid: stream trades, 3 node(s), 2 publisher host(s), 1 subscriber host(s)" in out


def test_config_given_twice_differently_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_rt(["validate", "a.yaml", "--config", "b.yaml"], capsys)
    assert code == 2 and "give the configuration once" in err


def test_schema_is_shipped_and_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_rt(["config", "schema"], capsys)
    assert code == 0
    shipped = (ROOT / "etc" / "rt.schema.json").read_text()
    assert out == shipped, "etc/rt.schema.json is stale: run `make units`"
    schema = json.loads(shipped)
    example = yaml.safe_load((ROOT / "etc" / "rt.yaml").read_text())
    jsonschema.validate(example, schema)  # editors would accept sizes such as "1GiB"
    bad = {**example, "appliance": {"units": {"sequencer": {"watchdog_s": "ten"}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
