"""``rt apply``: compare what a host should have with what it has, then write the difference.

Order: plan (read only) -> show -> write each file atomically (temporary file in
the same directory, mode and group set, fsync, rename, fsync the directory) ->
``systemctl daemon-reload``. Units are never restarted here: the operator decides
when, and is told which. A unit this command wrote earlier (its first line is
:data:`~rt_appliance.appliance.render.MARKER`) that the host no longer runs is removed.
"""

from __future__ import annotations

import contextlib
import difflib
import grp
import os
import pwd
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rt_appliance.appliance.hostcheck import under_root
from rt_appliance.appliance.render import MARKER, UNIT_DIR, HostFile
from rt_appliance.errors import RTError
from rt_appliance.log.segments import fsync_dir

__all__ = ["Change", "plan", "reload_systemd", "show_diff", "write"]


@dataclass(frozen=True)
class Change:
    """One file to create, update (content or mode) or remove under ``root``."""

    path: PurePosixPath  # as the host sees it
    target: Path  # where it is written: path under the root
    old: bytes | None  # None: it does not exist
    new: HostFile | None  # None: remove it

    @property
    def action(self) -> str:
        if self.new is None:
            return "removed"
        if self.old is None:
            return "created"
        return "updated" if self.old != self.new.content else "mode changed"


def plan(files: list[HostFile], root: Path) -> list[Change]:
    """What differs between ``files`` and the tree at ``root``, plus stale units to remove."""
    changes = []
    for file in files:
        target = under_root(root, file.path)
        if file.directory:
            if not target.is_dir():
                changes.append(Change(file.path, target, None, file))
            continue
        old = target.read_bytes() if target.exists() else None
        if old != file.content or _mode(target) != file.mode:
            changes.append(Change(file.path, target, old, file))
    wanted = {f.path for f in files}
    unit_dir = under_root(root, UNIT_DIR)
    for target in sorted(unit_dir.glob("rt-*.service")) if unit_dir.is_dir() else []:
        path = UNIT_DIR / target.name
        if path not in wanted and target.read_bytes().startswith(MARKER.encode()):
            changes.append(Change(path, target, target.read_bytes(), None))
    return changes


def _mode(path: Path) -> int | None:
    return stat.S_IMODE(path.stat().st_mode) if path.exists() else None


def show_diff(changes: list[Change]) -> str:
    """A unified diff of every change, as ``--dry-run`` prints it."""
    out = []
    for change in changes:
        if change.new is not None and change.new.directory:
            out.append(f"directory {change.path} would be made (mode {change.new.mode:04o})\n")
            continue
        old = (change.old or b"").decode(errors="replace").splitlines(keepends=True)
        new = (change.new.content if change.new else b"").decode().splitlines(keepends=True)
        before = f"a{change.path}" if change.old is not None else "/dev/null"
        after = f"b{change.path}" if change.new is not None else "/dev/null"
        out.extend(difflib.unified_diff(old, new, before, after))
        if change.action == "mode changed" and change.new is not None:
            out.append(f"mode of {change.path} would become {change.new.mode:04o}\n")
    return "".join(out)


def write(changes: list[Change]) -> None:
    """Carry out ``changes``: every file whole or not at all."""
    for change in changes:
        try:
            if change.new is None:
                change.target.unlink()
                fsync_dir(change.target.parent)
            elif change.new.directory:
                change.target.mkdir(mode=change.new.mode, parents=True, exist_ok=True)
                _own(change.target, change.new)
            else:
                _write_file(change.target, change.new)
        except OSError as exc:
            raise RTError(f"cannot write {change.target}: {exc.strerror or exc}") from exc


def _write_file(target: Path, file: HostFile) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.rt-apply")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(file.content)
            out.flush()
            os.fchmod(out.fileno(), file.mode)
            _own(tmp, file)
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(target.parent)


def _own(path: Path, file: HostFile) -> None:
    """chown to the file's owner and group when they exist here and we may (as root)."""
    if os.geteuid() != 0:
        return
    uid = gid = -1
    with contextlib.suppress(KeyError):
        uid = pwd.getpwnam(file.owner).pw_uid if file.owner else -1
    with contextlib.suppress(KeyError):
        gid = grp.getgrnam(file.group).gr_gid if file.group else -1
    if uid != -1 or gid != -1:
        os.chown(path, uid, gid)


def systemd_running() -> bool:
    """Whether this host was booted with systemd (so systemctl can talk to it)."""
    return Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None


def reload_systemd() -> None:
    """``systemctl daemon-reload``, so systemd reads the changed units."""
    result = subprocess.run(
        ["systemctl", "daemon-reload"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RTError(f"systemctl daemon-reload failed: {result.stderr.strip()}")


def active_units(units: list[str]) -> list[str]:
    """Those of ``units`` systemd runs now (they need a restart to use what changed)."""
    return [
        unit
        for unit in units
        if subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False).returncode == 0
    ]
