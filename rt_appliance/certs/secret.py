"""The stream's shared Spark secret: made by ``rt certs init`` beside the certificates.

Standalone Spark authenticates its master, workers and applications with one shared
secret (``spark.authenticate``), from which it also derives the keys that encrypt RPC
and shuffle traffic. The secret is 32 random bytes written as 64 hex digits in
``<tls dir>/spark.secret``, mode 0600 where it is made; on a host it is installed like
a private key (``root:rt``, 0640). :func:`read_secret` is what every Spark process of
the appliance reads it with, so that a missing, unreadable, exposed or malformed file
is refused with one clear message before any JVM starts.
"""

from __future__ import annotations

import re
import secrets
import stat
from pathlib import Path

from rt_appliance.errors import CertificateError

__all__ = ["SECRET_FILE", "make_secret", "read_secret"]

SECRET_FILE = "spark.secret"  # its name in a tls directory
_HEX = re.compile(r"[0-9a-f]{64}")


def make_secret() -> bytes:
    """A new secret as the file holds it: 64 hex digits and a newline."""
    return secrets.token_hex(32).encode() + b"\n"


def read_secret(path: Path) -> str:
    """The secret in ``path``; raises :class:`CertificateError` saying what is wrong."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        raise CertificateError(
            f"{path} is missing: the stream's Spark secret, made by `rt certs init` "
            "(or `rt certs spark-secret` for a stream set up before it); install it "
            "on every host that runs Spark like a private key (root:rt, mode 0640)"
        ) from None
    except OSError as exc:
        raise CertificateError(f"cannot read the Spark secret {path}: {exc.strerror}") from None
    if mode & stat.S_IROTH:
        raise CertificateError(
            f"{path} can be read by every user (mode {stat.S_IMODE(mode):04o}): "
            "chmod 0640 (or 0600) it, or make a new one"
        )
    if not _HEX.fullmatch(text):
        raise CertificateError(f"{path} does not hold a Spark secret (64 hex digits)")
    return text
