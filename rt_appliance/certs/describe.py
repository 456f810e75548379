"""Reading certificates and keys back: loading with clear errors, describing, naming a peer."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rt_appliance.certs.authority import PrivateKey
from rt_appliance.errors import CertificateError

__all__ = ["CertificateInfo", "describe", "load_certificate", "load_private_key", "peer_name"]

E = TypeVar("E", bound=x509.ExtensionType)


class CertificateInfo(TypedDict):
    """What :func:`describe` reports; every value is JSON-ready."""

    file: str
    subject: str  # RFC 4514, e.g. "O=rt-appliance,CN=rt-1"
    issuer: str
    serial: str  # hexadecimal
    key: str  # e.g. "ECDSA secp256r1"
    is_ca: bool
    sans: list[str]  # "DNS:rt-1", "IP:127.0.0.1"
    key_usage: list[str]  # "digital_signature", "key_agreement", ...
    extended_key_usage: list[str]  # "serverAuth", "clientAuth", ...
    not_before: str  # ISO 8601, UTC, ending in "Z"
    not_after: str
    days_left: int  # whole days until not_after, rounded down: negative once expired
    valid_now: bool
    sha256: str  # fingerprint, "AB:CD:..."


_EKU_NAMES = {
    ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth",
    ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth",
    ExtendedKeyUsageOID.CODE_SIGNING: "codeSigning",
    ExtendedKeyUsageOID.EMAIL_PROTECTION: "emailProtection",
    ExtendedKeyUsageOID.TIME_STAMPING: "timeStamping",
    ExtendedKeyUsageOID.OCSP_SIGNING: "OCSPSigning",
}

_KEY_USAGES = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
)


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CertificateError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc


def load_certificate(path: Path) -> x509.Certificate:
    """The (first) certificate in ``path``, PEM or DER."""
    data = _read(path, "certificate")
    if b"PRIVATE KEY-----" in data and b"-----BEGIN CERTIFICATE-----" not in data:
        raise CertificateError(f"{path}: is a private key, not a certificate")
    try:
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError as exc:
        raise CertificateError(f"{path}: not a valid certificate: {exc}") from exc


def load_private_key(path: Path) -> PrivateKey:
    """The unencrypted ECDSA private key in ``path`` (PEM)."""
    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"{path}: not a valid unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{path}: not an ECDSA key ({type(key).__name__})")
    return key


def peer_name(der: bytes) -> str:
    """The common name of a DER certificate: the configured host name of the peer."""
    try:
        cert = x509.load_der_x509_certificate(der)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except ValueError as exc:
        raise CertificateError(f"peer certificate cannot be parsed: {exc}") from exc
    if len(names) != 1:
        raise CertificateError(f"peer certificate has {len(names)} common names, not one")
    value = names[0].value
    return value.decode() if isinstance(value, bytes) else value


def describe(path: Path, *, now: datetime | None = None) -> CertificateInfo:
    """What a certificate file says, as JSON-ready values.

    ``days_left`` is whole days until ``not_after``, rounded down: negative once
    the certificate has expired.
    """
    cert = load_certificate(path)
    now = now if now is not None else datetime.now(UTC)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return {
        "file": str(path),
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "serial": f"{cert.serial_number:x}",
        "key": _key_type(cert),
        "is_ca": _is_ca(cert),
        "sans": _sans(cert),
        "key_usage": _key_usage(cert),
        "extended_key_usage": _extended_key_usage(cert),
        "not_before": start.isoformat().replace("+00:00", "Z"),
        "not_after": end.isoformat().replace("+00:00", "Z"),
        "days_left": math.floor((end - now).total_seconds() / 86400),
        "valid_now": start <= now <= end,
        "sha256": cert.fingerprint(hashes.SHA256()).hex(":").upper(),
    }


def _extension(cert: x509.Certificate, kind: type[E]) -> E | None:
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _key_type(cert: x509.Certificate) -> str:
    key = cert.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA {key.curve.name}"
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA {key.key_size}"
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return type(key).__name__.removesuffix("PublicKey")
    return type(key).__name__


def _is_ca(cert: x509.Certificate) -> bool:
    constraints = _extension(cert, x509.BasicConstraints)
    return constraints is not None and constraints.ca


def _sans(cert: x509.Certificate) -> list[str]:
    san = _extension(cert, x509.SubjectAlternativeName)
    if san is None:
        return []
    out: list[str] = []
    for general in san:
        if isinstance(general, x509.DNSName):
            out.append(f"DNS:{general.value}")
        elif isinstance(general, x509.IPAddress):
            out.append(f"IP:{general.value}")
        else:
            out.append(f"{type(general).__name__}:{general.value}")
    return out


def _key_usage(cert: x509.Certificate) -> list[str]:
    usage = _extension(cert, x509.KeyUsage)
    if usage is None:
        return []
    names = [name for name in _KEY_USAGES if getattr(usage, name)]
    if usage.key_agreement:
        names += [n for n in ("encipher_only", "decipher_only") if getattr(usage, n)]
    return names


def _extended_key_usage(cert: x509.Certificate) -> list[str]:
    usage = _extension(cert, x509.ExtendedKeyUsage)
    if usage is None:
        return []
    return [_EKU_NAMES.get(oid, oid.dotted_string) for oid in usage]
