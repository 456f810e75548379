"""Every daemon's /metrics, scraped from a live stream, passes `promtool check metrics`.

promtool (Debian package prometheus) checks Prometheus' naming conventions: counters
end in `_total`, units are base units named as suffixes, help texts are present.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.publish import Publisher
from rt_lab.testing.stream import LocalStream
from tests.helpers import read_all, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("promtool") is None,
        reason="promtool is not installed (Debian package prometheus)",
    ),
]


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStream]:
    with LocalStream(tmp_path_factory.mktemp("metrics"), nodes=1).start() as local:
        yield local


def scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text: str = answer.read().decode()
    return text


def endpoints(stream: LocalStream) -> dict[str, tuple[str, int]]:
    config, ports = stream.config, stream.config.ports
    node = config.node("rt-1").host
    return {  # rt node: the sequencer's, push server's and pull server's on one endpoint
        "node": (node, ports.sequencer_metrics),
        "push-client": (config.publisher("pub-1").host, ports.push_client_metrics),
        "pull-client": (config.subscriber("sub-1").host, ports.pull_client_metrics),
    }


def test_every_endpoint_passes_promtool(stream: LocalStream) -> None:
    with Publisher(stream.publisher_root("pub-1"), "trades", "pub-1") as publisher:
        for i in range(50):
            publisher.publish(f"m{i}".encode())
    copy = stream.subscriber_dir("sub-1")
    wait_until(
        lambda: copy.exists() and len(read_all(copy)) == 50,
        timeout=60,
    )
    for role, (host, port) in endpoints(stream).items():
        text = scrape(host, port)
        assert text.startswith("# HELP"), role
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert check.returncode == 0 and check.stdout == "" and check.stderr == "", (
            f"{role}: {check.stdout}{check.stderr}"
        )

    node = scrape(*endpoints(stream)["node"])
    assert "rt_sequencer_rejected_total 0.0" in node
    assert "rt_sequencer_pruned_files_total" in node
    assert "rt_sequencer_is_leader 1.0" in node
    received = [ln for ln in node.splitlines() if ln.startswith("rt_push_server_chunks_total{")]
    assert received and sum(float(ln.split()[-1]) for ln in received) >= 1, node
    assert "rt_pull_server_connections 1.0" in node  # sub-1's pull client
    pushed = scrape(*endpoints(stream)["push-client"])
    sent = [ln for ln in pushed.splitlines() if ln.startswith("rt_push_client_records_total{")]
    assert sent and sum(float(ln.split()[-1]) for ln in sent) >= 50, pushed


def test_promtool_refuses_a_badly_named_counter(tmp_path: Path) -> None:
    """The check above can fail: promtool complains of a counter without `_total`."""
    bad = "# HELP rt_bad_count A count\n# TYPE rt_bad_count counter\nrt_bad_count 1\n"
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=bad, capture_output=True, text=True
    )
    assert check.returncode != 0 or check.stdout or check.stderr
