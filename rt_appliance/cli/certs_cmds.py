"""``rt certs init``, ``issue`` and ``show``: the stream's mutual-TLS certificates."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rt_appliance.certs import describe, init_for_config, issue_for_host, write_spark_secret
from rt_appliance.config import load_config
from rt_appliance.errors import UsageError
from rt_appliance.limits import CA_CERT_DAYS, HOST_CERT_DAYS

F = TypeVar("F", bound=Callable[..., Any])


@click.group("certs")
def certs() -> None:
    """Make and inspect mutual-TLS certificates.

    Every connection between hosts is mutual TLS 1.3: both ends present a
    certificate from the stream's CA. One CA per stream; one certificate per
    host of the configuration, whose common name is the host's name. See
    docs/CERTIFICATES.md.
    """


def _config_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--config",
        "config_path",
        required=True,
        type=click.Path(dir_okay=False),
        help=help_text,
    )


def _out_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--out", type=click.Path(file_okay=False, path_type=Path), default=None, help=help_text
    )


def _days_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--days",
        type=click.IntRange(min=1),
        metavar="DAYS",
        default=HOST_CERT_DAYS,
        show_default=True,
        help=help_text,
    )


@certs.command("init")
@_config_option(
    "The stream configuration (rt.yaml) whose nodes, publishers and subscribers get certificates."
)
@_out_option("Directory to write into (created if missing)  [default: the config's tls.dir]")
@_days_option("Validity of each host certificate, in days (cut short if it would outlive the CA).")
@click.option(
    "--ca-days",
    type=click.IntRange(min=1),
    metavar="DAYS",
    default=CA_CERT_DAYS,
    show_default=True,
    help="Validity of the CA certificate, in days.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace existing files: a new CA and new certificates for every host (rotation; "
    "restart every service afterwards). Without it, nothing is written if any file exists.",
)
def init(config_path: str, out: Path | None, days: int, ca_days: int, force: bool) -> None:
    """Make a CA and a key and certificate for every host of a stream.

    Writes ca.crt, ca.key and, for every node, publisher and subscriber,
    <name>.crt and <name>.key (PEM, ECDSA P-256; keys mode 0600), and the
    stream's Spark secret spark.secret (mode 0600), and prints each file
    written. A host certificate names the host (CN and DNS name) and every
    address it is reached by (host, and a node's advertised_host), and serves
    both as server and as client certificate. Copy ca.crt and a host's own two
    files to that host's tls.dir, and spark.secret to every host that runs
    Spark; ca.key stays offline.
    """
    config = load_config(config_path)
    if out is None and "{name}" in config.tls.dir:
        raise UsageError(f"tls.dir {config.tls.dir} differs per host: pass --out DIR")
    out_dir = out if out is not None else Path(config.tls.dir)
    written = init_for_config(config, out_dir, days=days, ca_days=ca_days, force=force)
    for path in written:
        click.echo(str(path))
    click.echo(
        f"stream {config.stream}: a CA and {len(config.all_hosts())} host certificates "
        f"in {out_dir} (hosts valid {days} days, CA {ca_days} days)",
        err=True,
    )


@certs.command("issue")
@_config_option("The stream configuration (rt.yaml) that names the host.")
@click.option("--host", "host_name", required=True, help="The host to issue for.")
@click.option(
    "--ca-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory holding the stream's ca.crt and ca.key (from `rt certs init`).",
)
@_out_option("Directory to write into  [default: --ca-dir]")
@_days_option("Validity in days (cut short if it would outlive the CA).")
@click.option("--force", is_flag=True, help="Replace the host's existing certificate and key.")
def issue(
    config_path: str, host_name: str, ca_dir: Path, out: Path | None, days: int, force: bool
) -> None:
    """Make a key and certificate for one host, signed by the stream's existing CA.

    For a host added to the configuration, or a node rebuilt after a failure:
    no other host needs new files. Writes <host>.crt, <host>.key (mode 0600)
    and, if --out is another directory, a copy of ca.crt.
    """
    config = load_config(config_path)
    out_dir = out if out is not None else ca_dir
    for path in issue_for_host(config, ca_dir, host_name, out_dir, days=days, force=force):
        click.echo(str(path))


@certs.command("spark-secret")
@_out_option("Directory to write into (created if missing)  [default: the config's tls.dir]")
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="FILE",
    help="The stream configuration, for its tls.dir when --out is not given.",
)
@click.option("--force", is_flag=True, help="Replace an existing secret (restart Spark after).")
def spark_secret(out: Path | None, config_path: str | None, force: bool) -> None:
    """Make the stream's Spark secret, spark.secret, for a stream whose certificates
    were made before `rt certs init` made one.

    Standalone Spark authenticates its master, workers and applications with
    this one shared secret, and encrypts their traffic with keys derived from
    it. Install it on every host that runs Spark like a private key (root:rt,
    mode 0640), beside the certificates.
    """
    if out is None:
        if config_path is None:
            raise UsageError("pass --out DIR, or --config FILE to write into its tls.dir")
        config = load_config(config_path)
        if "{name}" in config.tls.dir:
            raise UsageError(f"tls.dir {config.tls.dir} differs per host: pass --out DIR")
        out = Path(config.tls.dir)
    click.echo(str(write_spark_secret(out, force=force)))


@certs.command("show")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def show(file: Path, as_json: bool) -> None:
    """Describe a certificate file (PEM or DER).

    Subject, issuer, serial, key type, whether it is a CA, subject alternative
    names, key usages, validity, days left (negative once expired) and the
    SHA-256 fingerprint. Exit status 1 if the file cannot be read or is not a
    certificate.
    """
    info = describe(file)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    days_left = info["days_left"]
    if days_left < 0:
        status = f"{days_left} (EXPIRED)"
    elif not info["valid_now"]:
        status = f"{days_left} (NOT YET VALID)"
    else:
        status = str(days_left)
    rows: list[tuple[str, object]] = [
        ("file", info["file"]),
        ("subject", info["subject"]),
        ("issuer", info["issuer"]),
        ("serial", info["serial"]),
        ("key", info["key"]),
        ("is_ca", "yes" if info["is_ca"] else "no"),
        ("sans", _joined(info["sans"])),
        ("key_usage", _joined(info["key_usage"])),
        ("extended_key_usage", _joined(info["extended_key_usage"])),
        ("not_before", info["not_before"]),
        ("not_after", info["not_after"]),
        ("days_left", status),
        ("sha256", info["sha256"]),
    ]
    for label, value in rows:
        click.echo(f"{label + ':':<20}{value}")


def _joined(values: list[str]) -> str:
    return ", ".join(values) or "-"
