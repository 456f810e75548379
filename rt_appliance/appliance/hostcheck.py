"""Checks ``rt apply`` makes before writing anything: would this host's daemons start?

A daemon that cannot load its certificate, or runs as a user that cannot read it,
fails only once systemd starts it, with a log line on one host. These checks find
the same problems at ``rt apply`` (and ``rt validate --host``), all at once:

* the host's CA certificate, certificate and key exist and can be parsed;
* the certificate names the host (its common name) and the key belongs to it;
* the stream's CA signed it, and it is valid now;
* on the live system (no ``--root``): the service user exists and can read all three;
* on a host that runs a process of the stream's Spark cluster (its master, a worker, a
  pipeline driving it): the Spark secret is there, well formed, not readable by every
  user, and readable by the service user.
"""

from __future__ import annotations

import datetime as dt
import grp
import os
import pwd
import stat
from pathlib import Path, PurePath

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

from rt_appliance.appliance.roles import needs_spark_secret
from rt_appliance.certs import load_certificate, load_private_key, read_secret
from rt_appliance.config.model import StreamConfig
from rt_appliance.errors import CertificateError

__all__ = ["host_problems", "under_root"]


def under_root(root: Path, path: PurePath | str) -> Path:
    """``path`` (absolute, as the host sees it) inside the tree at ``root``."""
    return root / Path(path).relative_to("/")


def host_problems(config: StreamConfig, host: str, root: Path) -> list[str]:
    """Every reason the daemons of ``host`` would fail to load their TLS files (none: [])."""
    tls = config.tls
    paths = {
        "CA certificate": under_root(root, tls.ca(host)),
        "certificate": under_root(root, tls.cert(host)),
        "key": under_root(root, tls.key(host)),
    }
    problems = [f"{what} {path} is missing" for what, path in paths.items() if not path.exists()]
    if problems:
        return [*problems, f"make them with `rt certs init` and copy them to {tls.dir_of(host)}"]
    try:
        ca = load_certificate(paths["CA certificate"])
        cert = load_certificate(paths["certificate"])
        key = load_private_key(paths["key"])
    except CertificateError as exc:
        return [str(exc)]
    problems += _identity(cert, host, paths["certificate"])
    if cert.public_key() != key.public_key():
        problems.append(f"key {paths['key']} does not belong to certificate {paths['certificate']}")
    problems += _issuer(ca, cert, paths["certificate"], paths["CA certificate"])
    if root == Path("/"):
        problems += _readable(config.appliance.user, list(paths.values()))
    if needs_spark_secret(config, host):
        problems += _spark_secret(config, host, root)
    return problems


def _spark_secret(config: StreamConfig, host: str, root: Path) -> list[str]:
    secret = under_root(root, config.tls.spark_secret(host))
    try:
        read_secret(secret)
    except CertificateError as exc:
        return [str(exc)]
    return _readable(config.appliance.user, [secret]) if root == Path("/") else []


def _identity(cert: x509.Certificate, host: str, path: Path) -> list[str]:
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [host]:
        shown = ", ".join(str(n) for n in names) or "no common name"
        return [f"certificate {path} is for {shown}, not for host {host}"]
    return []


def _issuer(ca: x509.Certificate, cert: x509.Certificate, path: Path, ca_path: Path) -> list[str]:
    problems = []
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        problems.append(f"certificate {path} was not signed by the CA in {ca_path}")
    now = dt.datetime.now(dt.UTC)
    for what, c, p in (("certificate", cert, path), ("CA certificate", ca, ca_path)):
        if not c.not_valid_before_utc <= now <= c.not_valid_after_utc:
            problems.append(
                f"{what} {p} is not valid now (valid {c.not_valid_before_utc:%Y-%m-%d} "
                f"to {c.not_valid_after_utc:%Y-%m-%d})"
            )
    return problems


def _readable(user: str, paths: list[Path]) -> list[str]:
    """Whether ``user`` could open each of ``paths`` by their owner, group and mode bits."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        return [f"service user {user!r} does not exist (the package creates it: install it)"]
    groups = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {account.pw_gid}
    problems = []
    for path in paths:
        if not _can_read(path, account.pw_uid, groups):
            st = path.stat()
            owner = f"{_user_name(st.st_uid)}:{_group_name(st.st_gid)}"
            problems.append(
                f"{path} is not readable by service user {user} "
                f"(mode {stat.S_IMODE(st.st_mode):04o} {owner}): "
                f"chgrp {account.pw_name} {path} && chmod g+r {path}"
            )
    return problems


def _can_read(path: Path, uid: int, gids: set[int]) -> bool:
    for part in [*reversed(path.parents), path]:
        st = os.stat(part)
        need = stat.S_IRUSR if part == path else stat.S_IXUSR  # read the file, enter dirs
        if uid == 0:
            continue
        if st.st_uid == uid:
            ok = st.st_mode & need
        elif st.st_gid in gids:
            ok = st.st_mode & (need >> 3)
        else:
            ok = st.st_mode & (need >> 6)
        if not ok:
            return False
    return True


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
