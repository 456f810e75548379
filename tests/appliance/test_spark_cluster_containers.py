"""The stream's Spark cluster on three nodes, each a container booting systemd.

Every node gets both packages, `spark.secret` beside its certificates and one rt.yaml
naming rt-1's address as the Spark master, then `rt apply`: rt-1 renders
`rt-spark-master.service`, every node `rt-spark-worker.service`, as docs/SPARK.md
says. Messages published through the stream end in every node's merged log; a job
submitted on rt-1 through `session_on_cluster`, asking for the `rtlog` resource, reads
`/var/lib/rt/merged` with `format("rt")` on the workers and gets exactly the messages
the subscriber received, read on the nodes only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.config.spark import DEFAULT_JAVA_HOME
from rt_appliance.publish import Publisher
from tests.appliance.test_cluster_containers import NODES, Cluster, _hosts, _identical, wait_for
from tests.appliance.test_container import spark_package
from tests.appliance.test_spark_container import JAVA_CONF, _missing
from tests.helpers import payloads, read_all

pytestmark = [
    pytest.mark.container,
    pytest.mark.spark_cluster,
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]

MESSAGES = 3000
WORKERS_JSON = (
    "import json, urllib.request; "
    "state = json.load(urllib.request.urlopen('http://127.0.0.1:8080/json/', timeout=5)); "
    "print(json.dumps(sorted(w['host'] for w in state['workers'] if w['state'] == 'ALIVE')))"
)
JOB = """
import json, socket
from pyspark.sql import SparkSession
from rt_appliance.config import load_config
from rt_appliance.spark.security import session_on_cluster

builder = (
    SparkSession.builder.appName("read-the-stream")
    .config("spark.executor.resource.rtlog.amount", "1")
    .config("spark.task.resource.rtlog.amount", "1")
    .config("spark.executor.memory", "512m")
    .config("spark.ui.enabled", "false")
)
spark = session_on_cluster(builder, load_config("/etc/rt/rt.yaml"), "rt-1")
import rt_appliance.spark

rt_appliance.spark.register(spark)
df = spark.read.format("rt").option("splitBytes", "4MiB").load("/var/lib/rt/merged")


def where(rows):
    rows = list(rows)
    return [(socket.gethostname(), [bytes(r.payload).decode() for r in rows])]


read = df.rdd.mapPartitions(where).collect()
print("READ " + json.dumps(read), flush=True)
spark.stop()
"""


@pytest.fixture()
def spark_cluster(tmp_path: Path) -> Iterator[Cluster]:
    spark_package()
    for made in _hosts(tmp_path, len(NODES)):
        made.spark_deb = spark_package()
        made.binds |= {Path(DEFAULT_JAVA_HOME): DEFAULT_JAVA_HOME, JAVA_CONF: str(JAVA_CONF)}
        yield made


@pytest.mark.timeout(1500)
def test_a_job_on_the_streams_spark_cluster_reads_every_nodes_log(
    spark_cluster: Cluster,
) -> None:
    cluster = spark_cluster
    master = f"spark://{cluster.hosts[0].address}:7077"  # rt-1's address
    cluster.spark = {
        "enabled": True,
        "master": master,
        "worker": {"enabled": True, "master_url": master, "cores": 1, "memory": "1GiB"},
    }
    config = cluster.start_stream()
    rt1 = cluster.containers["rt-1"]
    applied = rt1.run("rt", "apply", "--host", "rt-1").stdout
    assert "rt-spark-master.service" in rt1.run("ls", "/etc/systemd/system").stdout, applied
    began = time.monotonic()
    rt1.run("systemctl", "start", "rt-spark-master", timeout_s=200)
    for name in NODES:
        cluster.containers[name].run("systemctl", "start", "rt-spark-worker", timeout_s=200)

    def workers() -> list[str]:
        out = rt1.run("/opt/rt-appliance/bin/python", "-c", WORKERS_JSON, check=False)
        return json.loads(out.stdout) if out.returncode == 0 else []

    nodes = sorted(h.address for h in cluster.hosts)
    wait_for(lambda: workers() == nodes, "a worker on every node registered", timeout_s=240)
    joined = time.monotonic() - began

    copy = config.data_dir_of(config.subscriber("sub-1")) / "sub" / "cluster"
    pub_root = config.data_dir_of(config.publisher("pub-1")) / "pub"
    sent = [f"tick-{n}".encode() for n in range(MESSAGES)]
    with Publisher(pub_root, "ticks", "pub-1", fsync="always") as publisher:
        publisher.publish_batch(sent)
    wait_for(lambda: copy.exists() and payloads(read_all(copy)) == sent, "delivered")
    _identical(cluster, NODES)

    # Java is bound in from this machine, without Debian's alternatives: say where
    (rt1.root / "tmp/job.py").write_text(JOB)
    started = time.monotonic()
    done = rt1.run(
        "runuser", "-u", "rt", "--", "env", f"JAVA_HOME={DEFAULT_JAVA_HOME}",
        "/opt/rt-appliance/bin/python", "/tmp/job.py",
        check=False, timeout_s=600,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[:5000]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("READ "))
    read = json.loads(line.removeprefix("READ "))
    hosts = {host for host, _ in read}
    got = [payload.encode() for _, part in read for payload in part]
    print(
        f"spark cluster: 3 workers registered {joined:.1f}s after the master's start; the job "
        f"read {len(got)} messages in {len(read)} task(s) on {sorted(hosts)} in {took:.1f}s"
    )
    assert got == sent  # exactly what the subscriber received, in the stream's order
    assert hosts <= set(NODES)  # read on the nodes only
    leaked = rt1.run("sh", "-c", "cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '").stdout
    secret = (cluster.work / "tls" / "spark.secret").read_text().strip()
    assert secret not in leaked
