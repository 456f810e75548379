"""LocalStream: configuration, certificates, daemons as processes, faults, and a clean stop."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rt_appliance import Publisher
from rt_appliance.errors import UsageError
from rt_lab.testing.checkers import compare_logs
from rt_lab.testing.cluster import wait_until
from rt_lab.testing.stream import LocalStream

pytestmark = pytest.mark.integration

PUBLISHERS = {"pub-1": ["trades"], "pub-2": ["quotes", "orders"]}


def test_push_replication_with_node_faults_and_a_clean_stop(tmp_path: Path) -> None:
    with LocalStream(tmp_path, 3, PUBLISHERS, ["sub-1", "sub-2"]) as stream:
        cfg = stream.config
        assert stream.node_names == ["rt-1", "rt-2", "rt-3"]
        assert [n.host for n in cfg.nodes] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        assert cfg.ports.push != 5002 and (tmp_path / "tls" / "rt-3.crt").is_file()
        assert stream.publisher_dir("pub-2", "orders") == tmp_path / "data/pub-2/pub/orders.pub-2"
        assert stream.merged_dir("rt-2") == tmp_path / "data/rt-2/merged"
        assert stream.subscriber_dir("sub-2") == tmp_path / "data/sub-2/sub/teststream"
        node = stream.node_daemon("rt-1")
        assert node.name == "sequencer-rt-1" and node.args[:1] == ["node"]
        with pytest.raises(UsageError, match="no node named"):
            stream.node_daemon("rt-9")

        for name in stream.node_names:
            stream.start_node(name)
        stream.publisher_daemon("pub-1").start()
        with Publisher(stream.publisher_root("pub-1"), "trades", "pub-1") as pub:
            pub.publish_batch([b"first %d" % i for i in range(500)])
            source = stream.publisher_dir("pub-1", "trades")

            def replicated() -> bool:
                dirs = {n: stream.input_dir(n, "pub-1", "trades") for n in stream.node_names}
                return compare_logs({"source": source, **dirs}).identical

            wait_until(replicated, 20, "every node to hold the publisher's files")

            # A crashed node is restarted and catches up.
            stream.kill_node("rt-2", signal.SIGKILL)
            assert stream.exited() == {"sequencer-rt-2": -signal.SIGKILL}
            pub.publish_batch([b"second %d" % i for i in range(500)])
            stream.start_node("rt-2")
            wait_until(replicated, 20, "rt-2 to catch up")
        pids = stream.pids()
        assert "sequencer-rt-2" in pids and "push-client-pub-1" in pids
    assert not stream.pids()
    assert all(d.proc is None or d.proc.poll() is not None for d in stream.daemons.values())
    assert (tmp_path / "logs" / "sequencer-rt-2.log").read_text().count("starting") == 2
