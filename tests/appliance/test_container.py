"""The .deb under a real systemd: install, `rt apply`, start, watchdog, upgrade, remove, purge.

One container (systemd-nspawn --boot, its own network namespace) is an RT node of a
one-node stream, set up as docs/OPERATIONS.md says: the package installed, the
certificates in /etc/rt/tls, /etc/rt/rt.yaml edited, `rt apply --host rt-1`, then
`systemctl start`. The packages come from `make package` (built here if missing).
"""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rt_lab.testing.nspawn import Container, nspawn_missing

pytestmark = [
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.skipif(nspawn_missing() is not None, reason=nspawn_missing() or ""),
]

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
SOURCE_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
NODE_UNITS = ["rt-sequencer.service"]  # rt node: push server, sequencer, pull server


def package(release: int, kind: str = "deb", version: str | None = None) -> Path:
    """dist/'s package of this release, built (or repacked) if missing. ``version``: the
    same sources built as another version (a rolling upgrade's new release)."""
    version = version or SOURCE_VERSION
    name = (
        f"rt-appliance_{version}-{release}_amd64.deb"
        if kind == "deb"
        else f"rt-appliance-{version}-{release}.x86_64.rpm"
    )
    if not (DIST / name).exists():
        env = {**os.environ, "RT_PKG_RELEASE": str(release), "RT_PKG_VERSION": version}
        if release > 1:
            env["RT_PKG_REPACK"] = "1"
        if release > 1 or version != SOURCE_VERSION:
            env["RT_PKG_SPARK"] = "0"  # the upgrade tests need rt-appliance only
        subprocess.run(["bash", str(ROOT / "packaging/build.sh")], check=True, env=env)
    return DIST / name


# The last commit whose nodes ran three units (rt-push-server, rt-sequencer and
# rt-pull-server) instead of `rt node`: the release an upgrade to one node unit starts from.
THREE_UNIT_COMMIT = "16f2fc0778d6ebd5b309b7d81b13aca3ef0d7efd"
THREE_UNIT_NODE_UNITS = ["rt-push-server.service", "rt-sequencer.service", "rt-pull-server.service"]


def three_unit_release() -> tuple[Path, Path]:
    """The .deb of the three-unit release (dist/previous/, built from its commit with that
    commit's own packaging/build.sh if missing) and the Python of its environment,
    unpacked under build/previous/, to run its push and pull clients here."""
    previous = DIST / "previous"
    deb = previous / "rt-appliance_0.1.0-1_amd64.deb"
    if not deb.exists():
        found = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", f"{THREE_UNIT_COMMIT}^{{commit}}"],
            capture_output=True,
        )
        if found.returncode != 0:
            pytest.skip(f"commit {THREE_UNIT_COMMIT[:7]} is not in this clone (a shallow one?)")
        src = ROOT / "build" / "previous-src"
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "remove", "--force", str(src)], capture_output=True)
        subprocess.run([*git, "prune"], check=True)
        subprocess.run(
            [*git, "add", "--detach", "--force", str(src), THREE_UNIT_COMMIT],
            check=True,
            capture_output=True,
        )
        try:
            env = {**os.environ, "RT_PKG_RELEASE": "1", "RT_PKG_SPARK": "0"}
            subprocess.run(["bash", str(src / "packaging/build.sh")], check=True, env=env)
            previous.mkdir(parents=True, exist_ok=True)
            (src / "dist" / deb.name).replace(deb)
        finally:
            subprocess.run([*git, "remove", "--force", str(src)], check=True)
    unpacked = ROOT / "build" / "previous"
    python = unpacked / "opt/rt-appliance/bin/python"
    if not python.exists():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    return deb, python


def wait_for(condition: object, what: str, timeout_s: float = 60.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.25)


STREAM = {
    "stream": "appliance",
    "nodes": [{"name": "rt-1", "host": "127.0.0.1"}],
    "publishers": [{"name": "pub-1", "host": "127.0.0.2", "topics": ["trades"]}],
    "subscribers": [{"name": "sub-1", "host": "127.0.0.3"}],
    # a short watchdog, so the test sees systemd restart a frozen daemon soon
    "appliance": {"units": {"sequencer": {"watchdog_s": 3}}},
}


def spark_package(kind: str = "deb") -> Path:
    """dist/'s rt-appliance-spark of release 1, built with rt-appliance if missing."""
    name = (
        "rt-appliance-spark_0.1.0-1_amd64.deb"
        if kind == "deb"
        else "rt-appliance-spark-0.1.0-1.x86_64.rpm"
    )
    if not (DIST / name).exists():
        env = {**os.environ, "RT_PKG_RELEASE": "1", "RT_PKG_SPARK": "1"}
        subprocess.run(["bash", str(ROOT / "packaging/build.sh")], check=True, env=env)
    return DIST / name


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    package(1)
    package(2)
    logs = tmp_path_factory.mktemp("container")
    with Container("rt-node-1", logs, binds={DIST: "/mnt/dist"}) as container:
        yield container


def test_package_install_apply_start_watchdog_upgrade_remove_purge(node: Container) -> None:
    # 1. Install.
    node.run("dpkg", "-i", "/mnt/dist/rt-appliance_0.1.0-1_amd64.deb")
    assert node.run("id", "-gn", "rt").stdout.strip() == "rt"
    version = node.run("runuser", "-u", "rt", "--", "rt", "--version").stdout
    assert version.strip() == "rt, version 0.1.0"
    assert node.run("stat", "-c", "%a %U:%G", "/etc/rt/rt.yaml").stdout.split() == [
        "640",
        "root:rt",
    ]
    # The lab is not in the package: its commands say in one line what to install.
    demo = node.run("rt", "demo", check=False)
    assert demo.returncode == 2, demo
    assert demo.stderr.count("\n") == 1 and "comes with rt-lab" in demo.stderr

    # 2. Certificates and the configuration, as an operator makes them.
    (node.root / "etc/rt/rt.yaml").write_text(yaml.safe_dump(STREAM, sort_keys=False))
    node.run("rt", "validate", "/etc/rt/rt.yaml")
    node.run("rt", "certs", "init", "--config", "/etc/rt/rt.yaml", "--out", "/root/tls")
    node.run("install", "-m", "0644", "/root/tls/ca.crt", "/root/tls/rt-1.crt", "/etc/rt/tls/")
    refused = node.run("rt", "apply", "--host", "rt-1", check=False)  # key not there yet
    assert refused.returncode == 2 and "key /etc/rt/tls/rt-1.key is missing" in refused.stderr
    node.run("install", "-m", "0600", "/root/tls/rt-1.key", "/etc/rt/tls/")
    refused = node.run("rt", "apply", "--host", "rt-1", check=False)  # rt cannot read it
    assert refused.returncode == 2 and "not readable by service user rt" in refused.stderr
    node.run("chgrp", "rt", "/etc/rt/tls/rt-1.key")
    node.run("chmod", "0640", "/etc/rt/tls/rt-1.key")

    # 3. rt apply: units written, systemd reloaded; a second run changes nothing.
    applied = node.run("rt", "apply", "--host", "rt-1")
    assert "created /etc/systemd/system/rt-sequencer.service" in applied.stdout
    assert "systemd reloaded" in applied.stdout
    assert "start with: systemctl enable --now" in applied.stdout
    for unit in NODE_UNITS:
        node.run("systemd-analyze", "verify", "--man=no", f"/etc/systemd/system/{unit}")
    again = node.run("rt", "apply", "--host", "rt-1")
    assert "nothing to change" in again.stdout

    # 4. Start: Type=notify returns once each daemon serves.
    node.run("systemctl", "enable", "--now", *NODE_UNITS, timeout_s=200)
    for unit in NODE_UNITS:
        assert node.unit_property(unit, "ActiveState") == "active", node.run(
            "journalctl", "-u", unit, "--no-pager", check=False
        ).stdout
    wait_for(
        lambda: node.unit_property("rt-sequencer.service", "StatusText").startswith("leader"),
        "the sequencer's status says leader",
    )
    main = node.unit_property("rt-sequencer.service", "MainPID")
    assert node.run("stat", "-c", "%U", f"/proc/{main}").stdout.strip() == "rt"
    status = node.run("rt", "status", "--as", "rt-1", "--json")
    assert '"role": "leader"' in status.stdout

    cmdline = node.run("cat", f"/proc/{main}/cmdline").stdout
    assert "\0node\0--config" in cmdline, cmdline  # rt node: the whole node
    for port in ("5001", "5002"):  # its pull and push servers listen in that process
        listening = node.run("ss", "-Hltnp", f"sport = :{port}").stdout
        assert f"pid={main}," in listening, listening

    # 5. A frozen daemon stops its pings: systemd's watchdog restarts it.
    before = node.unit_property("rt-sequencer.service", "MainPID")
    node.run("systemctl", "kill", "--signal=SIGSTOP", "rt-sequencer.service")
    wait_for(
        lambda: (
            node.unit_property("rt-sequencer.service", "NRestarts") == "1"
            and node.unit_property("rt-sequencer.service", "ActiveState") == "active"
        ),
        "systemd restarts the frozen node",
        timeout_s=60,
    )
    assert node.unit_property("rt-sequencer.service", "MainPID") != before
    journal = node.run("journalctl", "-u", "rt-sequencer", "--no-pager").stdout
    assert "Watchdog timeout" in journal
    wait_for(
        lambda: node.unit_property("rt-sequencer.service", "StatusText").startswith("leader"),
        "the restarted node leads again",
    )

    # 6. Upgrade: data and configuration stay, running units restart.
    merged_before = node.run("ls", "/var/lib/rt/merged").stdout
    pids = {unit: node.unit_property(unit, "MainPID") for unit in NODE_UNITS}
    node.run("dpkg", "-i", "--force-confold", "/mnt/dist/rt-appliance_0.1.0-2_amd64.deb")
    assert node.run("dpkg-query", "-W", "rt-appliance").stdout.split() == [
        "rt-appliance",
        "0.1.0-2",
    ]
    for unit in NODE_UNITS:
        assert node.unit_property(unit, "ActiveState") == "active"
        assert node.unit_property(unit, "MainPID") != pids[unit], f"{unit} was not restarted"
    assert yaml.safe_load((node.root / "etc/rt/rt.yaml").read_text()) == STREAM
    assert node.run("ls", "/var/lib/rt/merged").stdout == merged_before

    # 7. Remove: units stopped, configuration, certificates and data kept.
    node.run("dpkg", "-r", "rt-appliance")
    for unit in NODE_UNITS:
        assert node.unit_property(unit, "ActiveState") in {"inactive", "failed"}
    for kept in ("/etc/rt/rt.yaml", "/etc/rt/tls/rt-1.key", "/var/lib/rt/merged"):
        node.run("test", "-e", kept)

    # 8. Purge: the configuration and rendered units go; data and keys stay.
    node.run("dpkg", "-P", "rt-appliance")
    for gone in ("/etc/rt/rt.yaml", "/etc/systemd/system/rt-sequencer.service"):
        assert node.run("test", "-e", gone, check=False).returncode == 1, gone
    for kept in ("/etc/rt/tls/rt-1.key", "/var/lib/rt/merged"):
        node.run("test", "-e", kept)


def test_rpm_contents_and_scripts() -> None:
    rpm = package(1, "rpm")
    listing = subprocess.run(["rpm", "-qpl", str(rpm)], capture_output=True, text=True, check=True)
    paths = set(listing.stdout.split())
    for path in (
        "/opt/rt-appliance/bin/rt",
        "/usr/bin/rt",
        "/etc/rt/rt.yaml",
        "/usr/lib/sysusers.d/rt-appliance.conf",
        "/usr/lib/tmpfiles.d/rt-appliance.conf",
    ):
        assert path in paths, path
    config = subprocess.run(["rpm", "-qpc", str(rpm)], capture_output=True, text=True, check=True)
    assert "/etc/rt/rt.yaml" in config.stdout.split()
    scripts = subprocess.run(
        ["rpm", "-qp", "--scripts", str(rpm)], capture_output=True, text=True, check=True
    ).stdout
    assert "postinstall scriptlet" in scripts and "systemd-sysusers" in scripts
    assert "preuninstall scriptlet" in scripts and "postuninstall scriptlet" in scripts
    requires = subprocess.run(["rpm", "-qpR", str(rpm)], capture_output=True, text=True).stdout
    assert "python3.11" in requires and "shadow-utils" in requires
    deb = subprocess.run(
        ["dpkg-deb", "-f", str(package(1)), "Depends"], capture_output=True, text=True, check=True
    )
    assert "python3 (>= 3.11)" in deb.stdout and "python3 (<< 3.12)" in deb.stdout


# What the lab brings and the product must not: its modules and the peers' clients.
LAB_PATHS = (
    "/site-packages/rt_lab/",
    "/site-packages/rt_lab-",
    "/site-packages/rt_appliance/bench/",
    "/site-packages/rt_appliance/chaos/",
    "/site-packages/rt_appliance/demo/",
    "/site-packages/rt_appliance/testing/",
    "/site-packages/nats/",
    "/site-packages/rstream/",
    "/site-packages/redis/",
    "/site-packages/hiredis/",
    "/site-packages/matplotlib/",
)


@pytest.mark.parametrize("kind", ["deb", "rpm"])
def test_packages_carry_the_product_only(kind: str) -> None:
    command = ["dpkg-deb", "-c"] if kind == "deb" else ["rpm", "-qpl"]
    listing = subprocess.run(
        [*command, str(package(1, kind))], capture_output=True, text=True, check=True
    ).stdout
    paths = [line.split()[-1].removeprefix(".") for line in listing.splitlines() if line]
    site = "/opt/rt-appliance/lib/python3.11/site-packages"
    for module in ("rt_appliance/cli/main.py", "rt_appliance/sequencer/daemon.py"):
        assert f"{site}/{module}" in paths, module
    lab = sorted(path for path in paths if any(part in path for part in LAB_PATHS))
    assert lab == []


def test_spark_package_contents_and_depends() -> None:
    deb = spark_package()
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, check=True
    ).stdout
    assert "rt-appliance (= 0.1.0-1)" in fields
    assert "openjdk-17-jre-headless | java17-runtime-headless" in fields
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    paths = {line.split()[-1].removeprefix(".") for line in listing.splitlines()}
    for path in (
        "/opt/rt-appliance/spark/pyspark/bin/spark-class",  # SPARK_HOME of the units
        "/opt/rt-appliance/spark/pyspark/jars/",
        "/opt/rt-appliance/spark/pyarrow/__init__.py",
        "/opt/rt-appliance/spark/py4j/__init__.py",
        "/opt/rt-appliance/lib/python3.11/site-packages/rt-appliance-spark.pth",
    ):
        assert path in paths, path
    # nothing of rt-appliance's own files: both install side by side
    assert "/opt/rt-appliance/bin/python" not in paths
    requires = subprocess.run(
        ["rpm", "-qpR", str(spark_package("rpm"))], capture_output=True, text=True
    ).stdout
    assert "rt-appliance = 0.1.0-1" in requires and "java-17-openjdk-headless" in requires
