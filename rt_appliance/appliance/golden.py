"""The units of the example configuration, as the repository keeps them in ``systemd/``.

``python -m rt_appliance.appliance.golden`` (``make units``) rewrites ``systemd/`` from
``etc/rt.yaml``: one node, one publisher host and one subscriber host, each in a
directory named after the host. A test keeps them identical to what ``rt apply`` renders.

The example leaves the Spark worker off, so ``systemd/rt-1-spark-worker/`` holds the
units a cluster adds: ``rt-spark-worker.service`` of rt-1, rendered from the example
with ``spark.worker.enabled: true`` and ``master_url: spark://10.0.0.10:7077``, and
``rt-spark-master.service``, with the master URL naming rt-1's own address.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rt_appliance.appliance.render import unit_files
from rt_appliance.config import StreamConfig, load_config

__all__ = ["GOLDEN_DIRS", "GOLDEN_HOSTS", "WORKER_MASTER_URL", "golden_units", "with_worker"]

GOLDEN_HOSTS = ("rt-1", "pub-1", "sub-1")
WORKER_DIR = "rt-1-spark-worker"
GOLDEN_DIRS = (*GOLDEN_HOSTS, WORKER_DIR)
WORKER_MASTER_URL = "spark://10.0.0.10:7077"


def with_worker(config: StreamConfig, master_url: str = WORKER_MASTER_URL) -> StreamConfig:
    """``config`` with Spark and its worker enabled (joining ``master_url``)."""
    worker = config.spark.worker.model_copy(update={"enabled": True, "master_url": master_url})
    spark = config.spark.model_copy(update={"enabled": True, "worker": worker})
    return config.model_copy(update={"spark": spark})


def golden_units(config_path: Path) -> dict[Path, str]:
    """Unit text by path relative to ``systemd/``."""
    config = load_config(config_path)
    units = {
        Path(host) / name: text
        for host in GOLDEN_HOSTS
        for name, text in unit_files(config, host).items()
    }
    worker = "rt-spark-worker.service"
    units[Path(WORKER_DIR) / worker] = unit_files(with_worker(config), "rt-1")[worker]
    master = "rt-spark-master.service"  # the master on rt-1 (its address in the URL)
    on_rt1 = with_worker(config, f"spark://{config.node('rt-1').host}:7077")
    units[Path(WORKER_DIR) / master] = unit_files(on_rt1, "rt-1")[master]
    return units


def main(argv: list[str]) -> None:
    config_path, out_dir = (Path(a) for a in (argv or ["etc/rt.yaml", "systemd"]))
    for relative, text in golden_units(config_path).items():
        target = out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(target)


if __name__ == "__main__":
    main(sys.argv[1:])
