"""Mutual TLS 1.3 contexts for every rt-appliance connection, and the peer's identity.

Both sides present a certificate issued by the stream's CA (``rt certs init``);
a certificate's common name is the name of a host in the configuration, and that
name decides what the peer may do (a publisher may write only its own host's
directories). Hostname checking is replaced by this explicit identity check, so
a client can reach a node through a load balancer whose address no certificate
names, and still know which node answered. Every ``SSLContext`` option that
matters is set here explicitly.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rt_appliance.config.model import TlsConfig
from rt_appliance.errors import PeerRejectedError, TransportError

__all__ = ["client_context", "peer_name", "server_context"]


def _context(purpose: int, tls: TlsConfig, name: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = False  # identity is checked by name against the config instead
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_TICKET
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    cert, key, ca = tls.cert(name), tls.key(name), tls.ca(name)
    try:
        ctx.load_verify_locations(cafile=str(ca))
        ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (OSError, ssl.SSLError) as exc:
        missing = [str(p) for p in (ca, cert, key) if not Path(p).exists()]
        hint = f" (missing: {', '.join(missing)}; run `rt certs init`)" if missing else ""
        raise TransportError(
            f"cannot load TLS files for {name} from {tls.dir_of(name)}: {exc}{hint}"
        ) from exc
    return ctx


def server_context(tls: TlsConfig, name: str) -> ssl.SSLContext:
    """The context a server of host ``name`` accepts connections with."""
    return _context(ssl.PROTOCOL_TLS_SERVER, tls, name)


def client_context(tls: TlsConfig, name: str) -> ssl.SSLContext:
    """The context a client on host ``name`` connects with."""
    return _context(ssl.PROTOCOL_TLS_CLIENT, tls, name)


def peer_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str:
    """The configured host name the peer's verified certificate names (its CN).

    Read from the certificate as the TLS library decoded it after verifying it (both
    sides require one), so that a node process needs no certificate parser of its own
    (``cryptography`` costs a node's start a tenth of its imports)."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        raise PeerRejectedError("peer presented no certificate")
    return common_name(cert)


def common_name(cert: Mapping[str, Any]) -> str:
    """The one common name in the subject of a certificate decoded by :mod:`ssl`."""
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    if len(names) != 1:
        raise PeerRejectedError(f"peer certificate has {len(names)} common names, not one")
    return str(names[0])
