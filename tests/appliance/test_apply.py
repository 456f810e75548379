"""`rt apply`: writes a host's units and config once, then nothing; refuses bad hosts early.

Every run goes through the real entry point with `--root` (a tree standing for the
host's /), so nothing on this machine changes. The service-user checks need the
live system, so they go through `rt validate --host`, which runs the same checks.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rt_appliance.certs import init_for_config
from rt_appliance.config import parse_config
from tests.appliance.test_validate import run_rt

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TEXT = (ROOT / "etc" / "rt.yaml").read_text()


def tree_files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def host_root(tmp_path: Path) -> tuple[Path, Path]:
    """A config file, and a root tree holding the stream's certificates in /etc/rt/tls."""
    config = tmp_path / "rt.yaml"
    config.write_text(EXAMPLE_TEXT)
    root = tmp_path / "root"
    init_for_config(parse_config(EXAMPLE_TEXT), root / "etc/rt/tls", days=30, force=False)
    return config, root


def apply(
    capsys: pytest.CaptureFixture[str], config: Path, root: Path, *extra: str, host: str = "rt-1"
) -> tuple[int, str, str]:
    return run_rt(
        ["apply", "--config", str(config), "--host", host, "--root", str(root), *extra], capsys
    )


def test_apply_writes_units_and_config_then_changes_nothing(
    host_root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, root = host_root
    code, out, _ = apply(capsys, config, root)
    assert code == 0
    units = root / "etc/systemd/system"
    assert sorted(p.name for p in units.iterdir()) == [
        "rt-sequencer.service",
        "rt-spark-pipeline.service",
    ]
    installed = root / "etc/rt/rt.yaml"
    assert installed.read_text() == EXAMPLE_TEXT and stat.S_IMODE(installed.stat().st_mode) == 0o640
    assert "created /etc/systemd/system/rt-sequencer.service" in out
    assert (ROOT / "systemd/rt-1/rt-sequencer.service").read_text() == (
        units / "rt-sequencer.service"
    ).read_text()

    before = tree_files(root)
    code, out, _ = apply(capsys, config, root)
    assert code == 0 and "nothing to change" in out
    assert tree_files(root) == before


def test_apply_updates_what_changed_and_removes_units_of_a_former_role(
    host_root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, root = host_root
    assert apply(capsys, config, root)[0] == 0
    config.write_text(
        EXAMPLE_TEXT.replace("watchdog_s: 10             # no", "watchdog_s: 20             # no")
    )
    code, out, _ = apply(capsys, config, root)
    assert code == 0
    assert out.splitlines() == [
        "updated /etc/rt/rt.yaml",
        "updated /etc/systemd/system/rt-sequencer.service",
    ]
    assert "WatchdogSec=20s" in (root / "etc/systemd/system/rt-sequencer.service").read_text()

    # The same machine now acts as sub-1: the node's units go, the pull client comes.
    (root / "etc/systemd/system/other.service").write_text("[Service]\nExecStart=/bin/true\n")
    code, out, _ = apply(capsys, config, root, host="sub-1")
    assert code == 0
    assert sorted(p.name for p in (root / "etc/systemd/system").iterdir()) == [
        "other.service",  # not written by rt apply: left alone
        "rt-pull-client.service",
    ]
    assert "removed /etc/systemd/system/rt-sequencer.service" in out


def test_dry_run_prints_a_diff_and_writes_nothing(
    host_root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, root = host_root
    before = tree_files(root)
    code, out, err = apply(capsys, config, root, "--dry-run")
    assert code == 0 and tree_files(root) == before
    assert "+++ b/etc/systemd/system/rt-sequencer.service" in out
    assert "+ExecStart=/opt/rt-appliance/bin/rt --log-level info node" in out
    assert "3 file(s) would change" in err

    assert apply(capsys, config, root)[0] == 0
    config.write_text(EXAMPLE_TEXT.replace("cpu_weight: 300", "cpu_weight: 500"))
    before = tree_files(root)
    code, out, _ = apply(capsys, config, root, "--dry-run")
    assert code == 0 and tree_files(root) == before
    assert "-CPUWeight=300\n+CPUWeight=500\n" in out


def _replace(root: Path, name: str, source: Path) -> None:
    shutil.copyfile(source, root / "etc/rt/tls" / name)


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("no-cert", "certificate {tls}/rt-1.crt is missing"),
        ("no-key", "key {tls}/rt-1.key is missing"),
        ("no-ca", "CA certificate {tls}/ca.crt is missing"),
        ("other-host", "certificate {tls}/rt-1.crt is for rt-2, not for host rt-1"),
        ("other-ca", "certificate {tls}/rt-1.crt was not signed by the CA in {tls}/ca.crt"),
        ("other-key", "key {tls}/rt-1.key does not belong to certificate {tls}/rt-1.crt"),
        ("garbage-key", "{tls}/rt-1.key: not a valid unencrypted PEM private key"),
    ],
)
def test_apply_refuses_a_host_whose_certificates_would_fail(
    host_root: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    breakage: str,
    message: str,
) -> None:
    config, root = host_root
    tls = root / "etc/rt/tls"
    other = tmp_path / "other"
    init_for_config(parse_config(EXAMPLE_TEXT), other, days=30, force=False)
    if breakage.startswith("no-"):
        {"no-cert": tls / "rt-1.crt", "no-key": tls / "rt-1.key", "no-ca": tls / "ca.crt"}[
            breakage
        ].unlink()
    elif breakage == "other-host":
        _replace(root, "rt-1.crt", tls / "rt-2.crt")
        _replace(root, "rt-1.key", tls / "rt-2.key")
    elif breakage == "other-ca":
        _replace(root, "rt-1.crt", other / "rt-1.crt")
        _replace(root, "rt-1.key", other / "rt-1.key")
    elif breakage == "other-key":
        _replace(root, "rt-1.key", other / "rt-1.key")
    else:
        (tls / "rt-1.key").write_text("not a key\n")
    before = tree_files(root)
    code, out, err = apply(capsys, config, root)
    assert code == 2 and out == ""
    assert "host rt-1 cannot run its daemons" in err
    assert message.format(tls=tls) in err, err
    assert tree_files(root) == before  # nothing written


def test_apply_refuses_a_host_not_in_the_stream(
    host_root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, root = host_root
    before = tree_files(root)
    code, _, err = apply(capsys, config, root, host="rt-9")
    assert code == 2
    assert (
        "host 'rt-9' is not in stream trades (hosts: rt-1, rt-2, rt-3, pub-1, pub-2, sub-1)" in err
    )
    assert tree_files(root) == before


@pytest.fixture()
def open_dir() -> Iterator[Path]:
    """A directory every user can enter (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="rt-apply-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files another user cannot read")
def test_a_key_the_service_user_cannot_read_is_refused(
    open_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = open_dir / "rt.yaml"
    text = EXAMPLE_TEXT.replace("dir: /etc/rt/tls", f"dir: {open_dir}/tls")
    config.write_text(
        text.replace("user: rt ", "user: nobody ").replace("group: rt ", "group: nogroup ")
    )
    init_for_config(parse_config(text), open_dir / "tls", days=30, force=False)
    (open_dir / "tls").chmod(0o755)
    for path in (open_dir / "tls").iterdir():
        path.chmod(0o644)
    key = open_dir / "tls/rt-1.key"
    key.chmod(0o600)  # as `rt certs init` leaves it: root only
    code, _, err = run_rt(["validate", str(config), "--host", "rt-1"], capsys)
    assert code == 2
    assert f"{key} is not readable by service user nobody (mode 0600 root:root)" in err

    key.chmod(0o644)
    code, out, _ = run_rt(["validate", str(config), "--host", "rt-1"], capsys)
    assert code == 0 and "host rt-1 is ready" in out


def test_a_service_user_that_does_not_exist_is_refused(
    open_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = open_dir / "rt.yaml"
    text = EXAMPLE_TEXT.replace("dir: /etc/rt/tls", f"dir: {open_dir}/tls")
    config.write_text(text.replace("user: rt ", "user: no-such-user "))
    init_for_config(parse_config(text), open_dir / "tls", days=30, force=False)
    code, _, err = run_rt(["validate", str(config), "--host", "pub-1"], capsys)
    assert code == 2 and "service user 'no-such-user' does not exist" in err


def test_a_host_certificate_issued_later_by_the_same_ca_is_accepted(
    host_root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A node rebuilt after a failure gets new files from the stream's CA; nobody else does."""
    config, root = host_root
    tls = root / "etc/rt/tls"
    old = (tls / "rt-1.crt").read_bytes()
    (tls / "rt-1.crt").unlink()
    (tls / "rt-1.key").unlink()
    assert apply(capsys, config, root)[0] == 2
    code, out, _ = run_rt(
        ["certs", "issue", "--config", str(config), "--host", "rt-1", "--ca-dir", str(tls)], capsys
    )
    assert code == 0 and out.split() == [str(tls / "rt-1.crt"), str(tls / "rt-1.key")]
    assert (tls / "rt-1.crt").read_bytes() != old
    assert stat.S_IMODE((tls / "rt-1.key").stat().st_mode) == 0o600
    assert apply(capsys, config, root)[0] == 0
    code, _, err = run_rt(
        ["certs", "issue", "--config", str(config), "--host", "rt-1", "--ca-dir", str(tls)], capsys
    )
    assert code == 1 and "refusing to overwrite" in err


def test_apply_replaces_the_three_units_of_a_node_with_one(
    host_root: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, root = host_root
    units = root / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    for old in ("push-server", "pull-server"):  # what rt apply wrote for a node before rt node
        (units / f"rt-{old}.service").write_text(
            "# Written by `rt apply` for node rt-1 of stream trades, from /etc/rt/rt.yaml.\n"
            f"[Service]\nExecStart=/opt/rt-appliance/bin/rt {old} --node rt-1\n"
        )
    code, out, _ = apply(capsys, config, root)
    assert code == 0
    assert "removed /etc/systemd/system/rt-push-server.service" in out
    assert "removed /etc/systemd/system/rt-pull-server.service" in out
    assert sorted(p.name for p in units.iterdir()) == [
        "rt-sequencer.service",
        "rt-spark-pipeline.service",
    ]
    assert " node --config" in (units / "rt-sequencer.service").read_text()
