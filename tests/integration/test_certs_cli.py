"""`rt certs` as a user runs it, and the certificates it makes in a real TLS 1.3 handshake."""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from rt_appliance.certs import create_ca, issue_host_cert, peer_name
from tests.helpers import rt

pytestmark = pytest.mark.integration

CONFIG = """
stream: trades
nodes:
  - {name: rt-1, host: 127.0.0.1, advertised_host: rt-1.example.com}
publishers:
  - {name: pub-1, host: 127.0.0.1, topics: [trades]}
subscribers:
  - {name: sub-1, host: 127.0.0.1}
tls:
  dir: TLS_DIR
"""

FILES = [
    "ca.crt",
    "ca.key",
    "spark.secret",
    "rt-1.crt",
    "rt-1.key",
    "pub-1.crt",
    "pub-1.key",
    "sub-1.crt",
    "sub-1.key",
]


def _config(tmp_path: Path, tls_dir: Path | None = None) -> Path:
    path = tmp_path / "rt.yaml"
    path.write_text(CONFIG.replace("TLS_DIR", str(tls_dir or tmp_path / "tls")))
    return path


def _init(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    result = rt("certs", "init", "--config", str(_config(tmp_path)), "--out", str(out), *extra)
    return result.stdout.splitlines()


def test_help() -> None:
    assert re.search(r"\n  certs +Make and inspect mutual-TLS certificates\.", rt("--help").stdout)
    init_help = rt("certs", "init", "--help").stdout
    assert all(opt in init_help for opt in ("--config", "--out", "--days", "--ca-days", "--force"))
    assert "--json" in rt("certs", "show", "--help").stdout


def test_init_prints_every_file_and_defaults_to_the_config_tls_dir(tmp_path: Path) -> None:
    result = rt("certs", "init", "--config", str(_config(tmp_path)), "--days", "30")
    tls = tmp_path / "tls"
    assert result.stdout.splitlines() == [str(tls / name) for name in FILES]
    assert "stream trades: a CA and 3 host certificates" in result.stderr
    assert sorted(p.name for p in tls.iterdir()) == sorted(FILES)
    shown = json.loads(rt("certs", "show", "--json", str(tls / "rt-1.crt")).stdout)
    assert shown["subject"] == "CN=rt-1,O=rt-appliance"
    assert shown["issuer"] == "CN=rt-appliance CA trades,O=rt-appliance"
    assert shown["sans"] == ["DNS:rt-1", "IP:127.0.0.1", "DNS:rt-1.example.com"]
    assert shown["extended_key_usage"] == ["serverAuth", "clientAuth"]
    assert shown["days_left"] == 29 and shown["valid_now"] is True and shown["is_ca"] is False
    text = rt("certs", "show", str(tls / "ca.crt")).stdout
    assert "subject:            CN=rt-appliance CA trades,O=rt-appliance\n" in text
    assert "is_ca:              yes\n" in text
    assert "key_usage:          key_cert_sign, crl_sign\n" in text
    assert "sans:               -\n" in text


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    _init(tmp_path, out)
    fingerprint = json.loads(rt("certs", "show", "--json", str(out / "ca.crt")).stdout)["sha256"]
    refused = rt(
        "certs", "init", "--config", str(_config(tmp_path)), "--out", str(out), check=False
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("rt: error: refusing to overwrite 9 existing file(s)")
    assert all(str(out / name) in refused.stderr for name in FILES)
    assert len(refused.stderr.splitlines()) == 1
    assert json.loads(rt("certs", "show", "--json", str(out / "ca.crt")).stdout)["sha256"] == (
        fingerprint
    )
    assert _init(tmp_path, out, "--force") == [str(out / name) for name in FILES]
    rotated = json.loads(rt("certs", "show", "--json", str(out / "ca.crt")).stdout)["sha256"]
    assert rotated != fingerprint


def test_spark_secret_makes_only_the_secret_and_keeps_an_existing_one(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    _init(tmp_path, out)
    secret = (out / "spark.secret").read_text()
    refused = rt("certs", "spark-secret", "--out", str(out), check=False)
    assert refused.returncode == 1 and "refusing to overwrite (use --force)" in refused.stderr
    assert (out / "spark.secret").read_text() == secret
    made = rt("certs", "spark-secret", "--out", str(out), "--force")
    assert made.stdout.splitlines() == [str(out / "spark.secret")]
    assert (out / "spark.secret").read_text() != secret
    assert (out / "spark.secret").stat().st_mode & 0o077 == 0
    other = tmp_path / "other"  # the config's tls.dir when --out is not given
    made = rt("certs", "spark-secret", "--config", str(_config(tmp_path, other)))
    assert made.stdout.splitlines() == [str(other / "spark.secret")]
    assert sorted(p.name for p in other.iterdir()) == ["spark.secret"]
    missing = rt("certs", "spark-secret", check=False)
    assert missing.returncode == 2 and "pass --out DIR, or --config FILE" in missing.stderr


def test_a_bad_config_reports_its_problems_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("stream: trades\nnodes:\n  - {name: rt-1, host: 127.0.0.1, port: 1}\n")
    result = rt("certs", "init", "--config", str(bad), "--out", str(tmp_path / "tls"), check=False)
    assert result.returncode == 2
    assert f"{bad}:3: nodes.0.port: Extra inputs are not permitted" in result.stderr
    assert not (tmp_path / "tls").exists()


def test_show_reports_an_expired_certificate(tmp_path: Path) -> None:
    ca_key, ca = create_ca("trades")
    start = datetime.now(UTC) - timedelta(days=10, hours=-12)
    _, cert = issue_host_cert(ca_key, ca, "rt-1", ["127.0.0.1"], days=1, valid_from=start)
    path = tmp_path / "old.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    assert "days_left:          -9 (EXPIRED)\n" in rt("certs", "show", str(path)).stdout
    shown = json.loads(rt("certs", "show", "--json", str(path)).stdout)
    assert shown["days_left"] == -9 and shown["valid_now"] is False


def test_show_of_an_unreadable_or_invalid_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "junk.crt").write_text("hello\n")
    for path, message in [
        (tmp_path / "missing.crt", "cannot read certificate: No such file or directory"),
        (tmp_path / "junk.crt", "not a valid certificate"),
    ]:
        result = rt("certs", "show", str(path), check=False)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.startswith(f"rt: error: {path}: {message}")
        assert len(result.stderr.splitlines()) == 1


# -- a real handshake ------------------------------------------------------------------------


def _context(side: int, tls: Path, name: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.load_verify_locations(cafile=str(tls / "ca.crt"))
    ctx.load_cert_chain(certfile=str(tls / f"{name}.crt"), keyfile=str(tls / f"{name}.key"))
    return ctx


def _exchange(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_hostname: str
) -> tuple[dict[str, object], dict[str, object]]:
    """One connection on 127.0.0.1: the client sends b"ping", the server answers b"PING"."""
    server: dict[str, object] = {}
    client: dict[str, object] = {}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)

        def serve() -> None:
            conn, _ = listener.accept()
            conn.settimeout(10)
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    server["peer"] = peer_name(tls.getpeercert(binary_form=True) or b"")
                    server["version"] = tls.version()
                    tls.sendall(tls.recv(4).upper())
            except (OSError, ssl.SSLError) as exc:
                server["error"] = exc

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                client["peer"] = peer_name(tls.getpeercert(binary_form=True) or b"")
                tls.sendall(b"ping")
                client["reply"] = tls.recv(4)
        except (OSError, ssl.SSLError) as exc:
            client["error"] = exc
        finally:
            thread.join(10)
    return server, client


@pytest.mark.parametrize("server_hostname", ["rt-1", "127.0.0.1", "rt-1.example.com"])
def test_mutual_tls_between_two_hosts_of_one_config(tmp_path: Path, server_hostname: str) -> None:
    tls = tmp_path / "tls"
    _init(tmp_path, tls)
    server, client = _exchange(
        _context(ssl.PROTOCOL_TLS_SERVER, tls, "rt-1"),
        _context(ssl.PROTOCOL_TLS_CLIENT, tls, "pub-1"),  # checks the hostname against SANs
        server_hostname,
    )
    assert client == {"peer": "rt-1", "reply": b"PING"}
    assert server == {"peer": "pub-1", "version": "TLSv1.3"}


def test_a_client_with_a_cert_from_another_ca_is_refused(tmp_path: Path) -> None:
    tls, other = tmp_path / "tls", tmp_path / "other"
    _init(tmp_path, tls)
    _init(tmp_path, other)  # the same config, another CA
    client_ctx = _context(ssl.PROTOCOL_TLS_CLIENT, tls, "pub-1")
    client_ctx.load_cert_chain(certfile=str(other / "pub-1.crt"), keyfile=str(other / "pub-1.key"))
    server, client = _exchange(_context(ssl.PROTOCOL_TLS_SERVER, tls, "rt-1"), client_ctx, "rt-1")
    assert isinstance(server["error"], ssl.SSLCertVerificationError)
    assert "certificate verify failed" in str(server["error"])
    assert "peer" not in server
    # In TLS 1.3 the client finishes its half first; the server's refusal ends the connection
    # (an alert or EOF) before any reply.
    assert "reply" not in client
    assert isinstance(client["error"], ssl.SSLError | ConnectionResetError), client


def test_a_server_with_a_cert_from_another_ca_is_refused(tmp_path: Path) -> None:
    tls, other = tmp_path / "tls", tmp_path / "other"
    _init(tmp_path, tls)
    _init(tmp_path, other)
    server, client = _exchange(
        _context(ssl.PROTOCOL_TLS_SERVER, other, "rt-1"),
        _context(ssl.PROTOCOL_TLS_CLIENT, tls, "pub-1"),
        "rt-1",
    )
    assert isinstance(client["error"], ssl.SSLCertVerificationError)
    assert "certificate verify failed" in str(client["error"])
    assert "peer" not in client and "peer" not in server
