"""Certificates for mutual TLS: one CA per stream, one certificate per configured host.

``rt certs init`` calls :func:`init_for_config`; the transport names a connecting
peer with :func:`peer_name`. See ``docs/CERTIFICATES.md``.
"""

from rt_appliance.certs.authority import PrivateKey, create_ca, issue_host_cert
from rt_appliance.certs.describe import (
    CertificateInfo,
    describe,
    load_certificate,
    load_private_key,
    peer_name,
)
from rt_appliance.certs.files import (
    host_addresses,
    init_for_config,
    issue_for_host,
    write_spark_secret,
)
from rt_appliance.certs.secret import read_secret

__all__ = [
    "CertificateInfo",
    "PrivateKey",
    "create_ca",
    "describe",
    "host_addresses",
    "init_for_config",
    "issue_for_host",
    "issue_host_cert",
    "load_certificate",
    "load_private_key",
    "peer_name",
    "read_secret",
    "write_spark_secret",
]
