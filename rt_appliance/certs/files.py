"""The certificate files of a stream: one CA and one certificate per configured host.

``init_for_config`` is what ``rt certs init`` runs. Everything is generated in
memory first, then each file is written atomically (a temporary file in the
same directory, fsync, rename), private keys with mode 0600 from the start.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from rt_appliance.certs.authority import PrivateKey, create_ca, issue_host_cert
from rt_appliance.certs.describe import load_certificate, load_private_key
from rt_appliance.certs.secret import SECRET_FILE, make_secret
from rt_appliance.config.model import NodeConfig, StreamConfig
from rt_appliance.errors import CertificateError, UsageError
from rt_appliance.limits import CA_CERT_DAYS
from rt_appliance.log.segments import fsync_dir

__all__ = [
    "cert_pem",
    "host_addresses",
    "init_for_config",
    "issue_for_host",
    "key_pem",
    "write_spark_secret",
]


def host_addresses(config: StreamConfig, name: str) -> list[str]:
    """Every address host ``name`` is reached by: its ``host``, and a node's ``advertised_host``."""
    for host in config.all_hosts():
        if host.name == name:
            addresses = [host.host]
            advertised = host.advertised_host if isinstance(host, NodeConfig) else None
            if advertised is not None and advertised not in addresses:
                addresses.append(advertised)
            return addresses
    names = ", ".join(h.name for h in config.all_hosts())
    raise UsageError(f"no host named {name!r} in stream {config.stream} (hosts: {names})")


def init_for_config(
    config: StreamConfig, out_dir: Path, *, days: int, force: bool, ca_days: int = CA_CERT_DAYS
) -> list[Path]:
    """Make a CA and a certificate for every host of ``config``; return the files written.

    Writes ``ca.crt``, ``ca.key``, ``<name>.crt`` and ``<name>.key`` for every host,
    and the stream's Spark secret ``spark.secret``, into ``out_dir`` (PEM; keys and the
    secret mode 0600). ``days`` is the validity of the
    host certificates, ``ca_days`` the CA's. Without ``force``, nothing is
    written if any of these files already exists.
    """
    out_dir = Path(out_dir)
    hosts = [h.name for h in config.all_hosts()]
    targets = [out_dir / "ca.crt", out_dir / "ca.key", out_dir / SECRET_FILE]
    for name in hosts:
        targets += [out_dir / f"{name}.crt", out_dir / f"{name}.key"]
    existing = [str(p) for p in targets if p.exists() or p.is_symlink()]
    if existing and not force:
        raise CertificateError(
            f"refusing to overwrite {len(existing)} existing file(s) "
            f"(use --force to replace them all): {', '.join(existing)}"
        )
    ca_key, ca_cert = create_ca(config.stream, days=ca_days)
    contents: list[tuple[Path, bytes, bool]] = [
        (out_dir / "ca.crt", cert_pem(ca_cert), False),
        (out_dir / "ca.key", key_pem(ca_key), True),
        (out_dir / SECRET_FILE, make_secret(), True),
    ]
    for name in hosts:
        key, cert = issue_host_cert(ca_key, ca_cert, name, host_addresses(config, name), days=days)
        contents += [
            (out_dir / f"{name}.crt", cert_pem(cert), False),
            (out_dir / f"{name}.key", key_pem(key), True),
        ]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path, data, secret in contents:
            _write_atomic(path, data, 0o600 if secret else 0o644)
        fsync_dir(out_dir)
    except OSError as exc:
        raise CertificateError(f"cannot write certificates to {out_dir}: {exc}") from exc
    return [path for path, _, _ in contents]


def issue_for_host(
    config: StreamConfig, ca_dir: Path, name: str, out_dir: Path, *, days: int, force: bool
) -> list[Path]:
    """A new key and certificate for host ``name``, signed by the CA in ``ca_dir``.

    For a host added to the stream, or a node rebuilt on new hardware, without a new
    CA (``init_for_config`` would make one, and every host would need new files).
    Writes ``<name>.crt``, ``<name>.key`` (mode 0600) and a copy of ``ca.crt``.
    """
    ca_cert = load_certificate(ca_dir / "ca.crt")
    ca_key = load_private_key(ca_dir / "ca.key")
    if ca_cert.public_key() != ca_key.public_key():
        raise CertificateError(f"{ca_dir}/ca.key does not belong to {ca_dir}/ca.crt")
    out_dir = Path(out_dir)
    targets = [out_dir / f"{name}.crt", out_dir / f"{name}.key"]
    existing = [str(p) for p in targets if p.exists()]
    if existing and not force:
        raise CertificateError(f"refusing to overwrite (use --force): {', '.join(existing)}")
    key, cert = issue_host_cert(ca_key, ca_cert, name, host_addresses(config, name), days=days)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(targets[0], cert_pem(cert), 0o644)
        _write_atomic(targets[1], key_pem(key), 0o600)
        written = targets
        if (out_dir / "ca.crt").resolve() != (ca_dir / "ca.crt").resolve():
            _write_atomic(out_dir / "ca.crt", cert_pem(ca_cert), 0o644)
            written = [*targets, out_dir / "ca.crt"]
        fsync_dir(out_dir)
    except OSError as exc:
        raise CertificateError(f"cannot write certificates to {out_dir}: {exc}") from exc
    return written


def write_spark_secret(out_dir: Path, *, force: bool) -> Path:
    """A new Spark secret in ``out_dir``/spark.secret (mode 0600), for a stream whose
    certificates were made before ``rt certs init`` made one."""
    path = Path(out_dir) / SECRET_FILE
    if (path.exists() or path.is_symlink()) and not force:
        raise CertificateError(f"refusing to overwrite (use --force): {path}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, make_secret(), 0o600)
        fsync_dir(path.parent)
    except OSError as exc:
        raise CertificateError(f"cannot write the Spark secret to {path}: {exc}") from exc
    return path


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` with ``data``: a temporary file made with ``mode`` in the same directory,
    fsynced, then renamed over ``path``."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
