"""A stream's certificate authority and the certificates it issues to hosts.

One CA per stream signs one certificate per host of the configuration (nodes,
publishers, subscribers). Every key is ECDSA P-256. A host certificate's common
name is the host's configured name, which is how a peer learns who connected;
its SubjectAlternativeName lists every name and address the host is reached by,
and it is valid both as a TLS server and as a TLS client (mutual TLS).
"""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rt_appliance.errors import UsageError
from rt_appliance.limits import CA_CERT_DAYS, CERT_BACKDATE_MINUTES, HOST_CERT_DAYS

__all__ = [
    "ORGANIZATION",
    "PrivateKey",
    "create_ca",
    "issue_host_cert",
]

PrivateKey = ec.EllipticCurvePrivateKey

ORGANIZATION = "rt-appliance"


def _new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _validity(valid_from: datetime | None, days: int) -> tuple[datetime, datetime]:
    if days < 1:
        raise UsageError(f"a certificate must be valid for at least 1 day, not {days}")
    start = valid_from
    if start is None:  # backdated: a peer whose clock is a little behind still accepts it
        start = datetime.now(UTC) - timedelta(minutes=CERT_BACKDATE_MINUTES)
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return start, start + timedelta(days=days)


def create_ca(
    stream: str, *, days: int = CA_CERT_DAYS, valid_from: datetime | None = None
) -> tuple[PrivateKey, x509.Certificate]:
    """A new self-signed CA for ``stream``: it may sign host certificates, nothing below them."""
    key = _new_key()
    start, end = _validity(valid_from, days)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, f"rt-appliance CA {stream}"),
        ]
    )
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_host_cert(
    ca_key: PrivateKey,
    ca_cert: x509.Certificate,
    name: str,
    addresses: list[str],
    *,
    days: int = HOST_CERT_DAYS,
    valid_from: datetime | None = None,
) -> tuple[PrivateKey, x509.Certificate]:
    """A new key and certificate for host ``name``, signed by the CA.

    The SubjectAlternativeName holds ``name`` and every address (an IP address
    as an IP entry, anything else as a DNS name), each once. The certificate
    never outlives its CA: its end is cut to the CA's.
    """
    key = _new_key()
    start, end = _validity(valid_from, days)
    end = min(end, ca_cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = []
    for entry in [name, *addresses]:
        general = _general_name(entry)
        if general not in sans:
            sans.append(general)
    public = key.public_key()
    try:
        ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        authority = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    except x509.ExtensionNotFound:
        authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                    x509.NameAttribute(NameOID.COMMON_NAME, name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_agreement=True), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(authority, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _general_name(entry: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(entry))
    except ValueError:
        return x509.DNSName(entry)


def _key_usage(
    *,
    digital_signature: bool = False,
    key_agreement: bool = False,
    key_cert_sign: bool = False,
    crl_sign: bool = False,
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=key_agreement,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )
