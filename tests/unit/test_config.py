"""The stream configuration: the example file, defaults, and one clear error per problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rt_appliance.config import ConfigError, load_config, parse_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """\
stream: s1
nodes:
  - name: rt-1
    host: 127.0.0.1
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "rt.yaml")
    return info.value.problems


def test_example_file_is_valid_and_complete() -> None:
    config = load_config(ROOT / "etc" / "rt.yaml")
    assert config.stream == "trades" and [n.name for n in config.nodes] == ["rt-1", "rt-2", "rt-3"]
    assert config.publisher("pub-1").topics == ["trades", "quotes.dedup"]
    assert config.replication.max_frame_bytes == 4 << 20
    assert config.ports.push == 5002 and config.ports.pull == 5001 and config.ports.raft == 7100


def test_defaults_and_name_substitution() -> None:
    config = parse_config(MINIMAL.replace("stream: s1", "stream: s1\ndata_dir: /d/{name}"))
    assert config.ports.push_lb == 5000 and config.ports.sequencer_metrics == 4000
    assert config.replication.fsync == "batch" and config.replication.delete_acked
    assert str(config.data_dir_of(config.node("rt-1"))) == "/d/rt-1"
    assert config.tls.cert("rt-1") == Path("/etc/rt/tls/rt-1.crt")


def test_every_problem_has_its_line_and_field_path() -> None:
    text = """\
stream: s1
nodes:
  - name: rt-1
    host: 127.0.0.1
  - name: rt-2
    host: 127.0.0.2
    colour: blue
publishers:
  - name: pub-1
    topics: [ok, "not ok"]
replication:
  max_frame_bytes: lots
"""
    found = problems(text)
    assert any(p.startswith("rt.yaml:7: nodes.1.colour:") and "Extra inputs" in p for p in found)
    assert any(p.startswith("rt.yaml:10: publishers.0.topics:") and "'not ok'" in p for p in found)
    assert any(
        p.startswith("rt.yaml:12: replication.max_frame_bytes:") and "not a size" in p
        for p in found
    )
    assert len(found) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            MINIMAL + "  - name: rt-1\n    host: 127.0.0.2\n  - name: rt-3\n    host: 127.0.0.3\n",
            "unique",
        ),
        (
            MINIMAL + "  - name: rt-2\n    host: 127.0.0.1\n  - name: rt-3\n    host: 127.0.0.3\n",
            "same host",
        ),
        (MINIMAL + "load_balancer: nohost\n", "host:port"),
        (MINIMAL + "publishers:\n  - name: rt-1\n    topics: [a]\n", "unique"),
        ("stream: bad name\n" + MINIMAL.split("\n", 1)[1], "invalid stream name"),
        (
            MINIMAL + "replication:\n  reconnect_initial_ms: 10\n  reconnect_max_ms: 5\n",
            "reconnect_max_ms",
        ),
        ("- just\n- a list\n", "mapping"),
        (MINIMAL + "  - name: rt-2\n    host: 127.0.0.2\n", "1, 3, 5 or 7 nodes, not 2"),
        ("stream: [unclosed\n", "not valid YAML"),
        (MINIMAL + "ports:\n  push_server_metrics: 4001\n", "runs inside rt node"),
    ],
)
def test_rules(text: str, expected: str) -> None:
    assert any(expected in p for p in problems(text)), problems(text)


def test_sizes_take_units() -> None:
    config = parse_config(MINIMAL + "replication:\n  max_frame_bytes: 1MiB\n")
    assert config.replication.max_frame_bytes == 1 << 20


def test_command_with_a_bad_config_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "rt.yaml"
    bad.write_text(
        MINIMAL.replace("host: 127.0.0.1", "host: 127.0.0.1\n    bogus: 1")
        + "data_dir: "
        + str(tmp_path / "d")
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rt_appliance.cli",
            "node",
            "--config",
            str(bad),
            "--node",
            "rt-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{bad}:5: nodes.0.bogus: Extra inputs are not permitted" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "d").exists()
