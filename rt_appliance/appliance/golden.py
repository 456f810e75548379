"""The units of the example configuration, as the repository keeps them in ``systemd/``.

``python -m rt_appliance.appliance.golden`` (``make units``) rewrites ``systemd/`` from
``etc/rt.yaml``: one node, one publisher host and one subscriber host, each in a
directory named after the host. A test keeps them identical to what ``rt apply`` renders.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rt_appliance.appliance.render import unit_files
from rt_appliance.config import load_config

__all__ = ["GOLDEN_HOSTS", "golden_units"]

GOLDEN_HOSTS = ("rt-1", "pub-1", "sub-1")


def golden_units(config_path: Path) -> dict[Path, str]:
    """Unit text by path relative to ``systemd/``."""
    config = load_config(config_path)
    return {
        Path(host) / name: text
        for host in GOLDEN_HOSTS
        for name, text in unit_files(config, host).items()
    }


def main(argv: list[str]) -> None:
    config_path, out_dir = (Path(a) for a in (argv or ["etc/rt.yaml", "systemd"]))
    for relative, text in golden_units(config_path).items():
        target = out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(target)


if __name__ == "__main__":
    main(sys.argv[1:])
