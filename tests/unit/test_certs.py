"""The stream's CA and host certificates: what they contain, how they are written, read back."""

from __future__ import annotations

import ipaddress
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rt_appliance.certs import (
    create_ca,
    describe,
    host_addresses,
    init_for_config,
    issue_host_cert,
    load_certificate,
    load_private_key,
    peer_name,
    read_secret,
    write_spark_secret,
)
from rt_appliance.config import StreamConfig, parse_config
from rt_appliance.errors import CertificateError, UsageError

pytestmark = pytest.mark.unit

CONFIG = """
stream: trades
nodes:
  - {name: rt-1, host: 10.0.0.1, advertised_host: rt-1.example.com}
  - {name: rt-2, host: node2.internal, advertised_host: 192.0.2.2}
  - {name: rt-3, host: "fd00::3"}
publishers:
  - {name: pub-1, host: 10.0.1.1, topics: [trades]}
subscribers:
  - {name: sub-1, host: sub-1}
"""

EXPECTED_SANS = {
    "rt-1": ["DNS:rt-1", "IP:10.0.0.1", "DNS:rt-1.example.com"],
    "rt-2": ["DNS:rt-2", "DNS:node2.internal", "IP:192.0.2.2"],
    "rt-3": ["DNS:rt-3", "IP:fd00::3"],
    "pub-1": ["DNS:pub-1", "IP:10.0.1.1"],
    "sub-1": ["DNS:sub-1"],  # its host is its name: listed once
}


@pytest.fixture(scope="module")
def config() -> StreamConfig:
    return parse_config(CONFIG)


def _sans(cert: x509.Certificate) -> list[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [f"IP:{g.value}" if isinstance(g, x509.IPAddress) else f"DNS:{g.value}" for g in san]


def test_ca_can_sign_hosts_and_nothing_below_them() -> None:
    key, ca = create_ca("trades")
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "rt-appliance CA trades"
    )
    assert ca.issuer == ca.subject
    ca.verify_directly_issued_by(ca)  # self-signed
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and not usage.digital_signature
    assert isinstance(key.curve, ec.SECP256R1)
    assert ca.not_valid_after_utc - ca.not_valid_before_utc == timedelta(days=3650)


def test_host_cert_names_the_host_and_serves_both_ends_of_a_connection() -> None:
    ca_key, ca = create_ca("trades")
    key, cert = issue_host_cert(
        ca_key, ca, "rt-1", ["10.0.0.1", "rt-1", "rt-1.example.com", "10.0.0.1", "fd00::1"]
    )
    assert cert.subject.rfc4514_string() == "CN=rt-1,O=rt-appliance"
    assert peer_name(cert.public_bytes(serialization.Encoding.DER)) == "rt-1"
    assert _sans(cert) == ["DNS:rt-1", "IP:10.0.0.1", "DNS:rt-1.example.com", "IP:fd00::1"]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.1"),
        ipaddress.ip_address("fd00::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_agreement and not usage.key_cert_sign
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    assert cert.public_key() == key.public_key()
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(days=825)
    cert.verify_directly_issued_by(ca)


def test_a_cert_from_another_ca_does_not_verify() -> None:
    ca_key, ca = create_ca("trades")
    _, cert = issue_host_cert(ca_key, ca, "rt-1", ["10.0.0.1"])
    _, same_name_ca = create_ca("trades")  # same subject, different key
    with pytest.raises(InvalidSignature):
        cert.verify_directly_issued_by(same_name_ca)
    _, other_stream_ca = create_ca("quotes")
    with pytest.raises(ValueError, match="does not match certificate issuer"):
        cert.verify_directly_issued_by(other_stream_ca)


def test_a_host_cert_never_outlives_its_ca() -> None:
    ca_key, ca = create_ca("trades", days=30)
    _, cert = issue_host_cert(ca_key, ca, "rt-1", [], days=825)
    assert cert.not_valid_after_utc == ca.not_valid_after_utc
    with pytest.raises(UsageError, match="at least 1 day"):
        issue_host_cert(ca_key, ca, "rt-1", [], days=0)


def test_host_addresses_include_advertised_host(config: StreamConfig) -> None:
    assert host_addresses(config, "rt-1") == ["10.0.0.1", "rt-1.example.com"]
    assert host_addresses(config, "rt-3") == ["fd00::3"]
    assert host_addresses(config, "pub-1") == ["10.0.1.1"]
    with pytest.raises(UsageError, match=r"no host named 'rt-9'.*pub-1"):
        host_addresses(config, "rt-9")


def test_init_writes_a_ca_and_every_host(config: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "tls"
    written = init_for_config(config, out, days=90, force=False)
    names = ["rt-1", "rt-2", "rt-3", "pub-1", "sub-1"]
    expected = ["ca.crt", "ca.key", "spark.secret"]
    expected += [f"{n}.{ext}" for n in names for ext in ("crt", "key")]
    assert [p.name for p in written] == expected
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)  # no temporary files left
    ca = load_certificate(out / "ca.crt")
    assert load_private_key(out / "ca.key").public_key() == ca.public_key()
    for name in names:
        cert = load_certificate(out / f"{name}.crt")
        cert.verify_directly_issued_by(ca)
        assert peer_name(cert.public_bytes(serialization.Encoding.DER)) == name
        assert _sans(cert) == EXPECTED_SANS[name]
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert load_private_key(out / f"{name}.key").public_key() == cert.public_key()
        assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(days=90)
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.suffix in (".key", ".secret"):
            assert mode == 0o600, path
        else:  # 0644 less the umask: readable, never writable by others
            assert mode & 0o600 == 0o600 and mode & 0o133 == 0, (path, oct(mode))


def test_init_refuses_to_overwrite_and_writes_nothing(config: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "tls"
    out.mkdir()
    (out / "rt-2.key").write_text("keep me")
    with pytest.raises(CertificateError, match=r"refusing to overwrite 1 existing") as info:
        init_for_config(config, out, days=90, force=False)
    assert str(out / "rt-2.key") in str(info.value) and "--force" in str(info.value)
    assert [p.name for p in out.iterdir()] == ["rt-2.key"]
    assert (out / "rt-2.key").read_text() == "keep me"


def test_init_with_force_makes_a_new_ca(config: StreamConfig, tmp_path: Path) -> None:
    init_for_config(config, tmp_path, days=90, force=False)
    old_ca = load_certificate(tmp_path / "ca.crt")
    init_for_config(config, tmp_path, days=90, force=True)
    new_ca = load_certificate(tmp_path / "ca.crt")
    assert new_ca.fingerprint(hashes.SHA256()) != old_ca.fingerprint(hashes.SHA256())
    load_certificate(tmp_path / "rt-1.crt").verify_directly_issued_by(new_ca)
    with pytest.raises(InvalidSignature):
        load_certificate(tmp_path / "rt-1.crt").verify_directly_issued_by(old_ca)
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_describe_a_host_cert(tmp_path: Path) -> None:
    ca_key, ca = create_ca("trades")
    start = datetime(2030, 1, 1, tzinfo=UTC)
    _, cert = issue_host_cert(ca_key, ca, "rt-1", ["127.0.0.1"], days=10, valid_from=start)
    path = _write_cert(tmp_path / "rt-1.crt", cert)
    info = describe(path, now=start + timedelta(days=3, hours=12))
    assert info == {
        "file": str(path),
        "subject": "CN=rt-1,O=rt-appliance",
        "issuer": "CN=rt-appliance CA trades,O=rt-appliance",
        "serial": f"{cert.serial_number:x}",
        "key": "ECDSA secp256r1",
        "is_ca": False,
        "sans": ["DNS:rt-1", "IP:127.0.0.1"],
        "key_usage": ["digital_signature", "key_agreement"],
        "extended_key_usage": ["serverAuth", "clientAuth"],
        "not_before": "2030-01-01T00:00:00Z",
        "not_after": "2030-01-11T00:00:00Z",
        "days_left": 6,
        "valid_now": True,
        "sha256": cert.fingerprint(hashes.SHA256()).hex(":").upper(),
    }
    assert describe(path, now=start - timedelta(days=1))["valid_now"] is False
    ca_info = describe(_write_cert(tmp_path / "ca.crt", ca))
    assert ca_info["is_ca"] is True and ca_info["key_usage"] == ["key_cert_sign", "crl_sign"]
    assert ca_info["sans"] == [] and ca_info["extended_key_usage"] == []


def test_an_expired_cert_has_negative_days_left(tmp_path: Path) -> None:
    ca_key, ca = create_ca("trades")
    now = datetime.now(UTC)
    _, cert = issue_host_cert(
        ca_key, ca, "rt-1", [], days=1, valid_from=now - timedelta(days=10, hours=-12)
    )
    info = describe(_write_cert(tmp_path / "old.crt", cert))
    assert info["days_left"] == -9 and info["valid_now"] is False
    # Expired by a moment is already negative.
    moment = cert.not_valid_after_utc + timedelta(seconds=1)
    assert describe(tmp_path / "old.crt", now=moment)["days_left"] == -1


def test_der_certificates_load_too(tmp_path: Path) -> None:
    _, ca = create_ca("trades")
    (tmp_path / "ca.der").write_bytes(ca.public_bytes(serialization.Encoding.DER))
    assert load_certificate(tmp_path / "ca.der") == ca


def test_unreadable_or_invalid_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match=r"missing\.crt: cannot read certificate"):
        load_certificate(tmp_path / "missing.crt")
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    with pytest.raises(CertificateError, match=r"junk\.crt: not a valid certificate"):
        describe(tmp_path / "junk.crt")
    key, _ = create_ca("trades")
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "a.key").write_bytes(pem)
    with pytest.raises(CertificateError, match=r"a\.key: is a private key, not a certificate"):
        load_certificate(tmp_path / "a.key")
    with pytest.raises(CertificateError, match=r"junk\.crt: not a valid unencrypted PEM"):
        load_private_key(tmp_path / "junk.crt")
    with pytest.raises(CertificateError, match=r"nope\.key: cannot read private key"):
        load_private_key(tmp_path / "nope.key")


def test_peer_name_of_garbage_is_an_error() -> None:
    with pytest.raises(CertificateError, match="cannot be parsed"):
        peer_name(b"\x30\x03\x02\x01\x00")


def test_the_spark_secret_is_made_and_refused_when_unfit(
    config: StreamConfig, tmp_path: Path
) -> None:
    out = tmp_path / "tls"
    init_for_config(config, out, days=90, force=False)
    secret = read_secret(out / "spark.secret")
    assert len(secret) == 64 and int(secret, 16) >= 0
    # another stream's init makes another secret
    init_for_config(config, tmp_path / "other", days=90, force=False)
    assert read_secret(tmp_path / "other" / "spark.secret") != secret
    # spark-secret: only with --force over an existing one
    with pytest.raises(CertificateError, match="refusing to overwrite"):
        write_spark_secret(out, force=False)
    assert read_secret(write_spark_secret(out, force=True)) != secret
    path = out / "spark.secret"
    path.chmod(0o644)
    with pytest.raises(CertificateError, match=r"can be read by every user.*chmod 0640"):
        read_secret(path)
    path.chmod(0o640)
    path.write_text("not hex\n")
    with pytest.raises(CertificateError, match="does not hold a Spark secret"):
        read_secret(path)
    path.unlink()
    with pytest.raises(CertificateError, match=r"missing.*rt certs init.*rt certs spark-secret"):
        read_secret(path)
