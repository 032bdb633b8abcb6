"""Credentials for a TLS + SuperNode-authenticated Flower federation (development use).

    python -m deploy.make_certs --out creds --nodes site-a,site-b [--hosts 127.0.0.1,localhost]
    python -m deploy.make_certs --out creds --nodes site-a --keys-only    # at a site: its key pair only

Writes into ``--out``:
- ``ca.crt`` / ``ca.key``: a private certificate authority (every site and ``flwr`` get ``ca.crt``);
- ``server.pem`` / ``server.key``: the SuperLink's certificate, signed by the CA, valid for every
  name in ``--hosts`` (IP addresses become IP SANs, anything else DNS SANs);
- ``keys/<node>`` / ``keys/<node>.pub``: one OpenSSH EC P-384 key pair per SuperNode; the
  coordinator registers the ``.pub`` with ``flwr supernode register``, the site keeps the private key.

Deviation from Flower's example ``generate_creds.py``: the TLS keys are EC P-256, not RSA-4096
(same protection for a test federation, generated in milliseconds instead of seconds).
This is a convenience for trials and tests; production sites should use their organisation's PKI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Credentials:
    """Paths of everything :func:`make_credentials` wrote."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    node_keys: dict[str, tuple[Path, Path]]  # node name -> (private key, public key)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "f3ocus federation"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)
    return path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_node_keys(out: Path, nodes: list[str]) -> dict[str, tuple[Path, Path]]:
    """One OpenSSH EC P-384 key pair per node: ``out/keys/<node>`` and ``out/keys/<node>.pub``."""
    bad = [n for n in nodes if not NODE_NAME.match(n)]
    if bad:
        raise ValueError(f"nodes: {bad[0]!r} is not a valid node name (letters, digits, '_', '.', '-')")
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"nodes = {nodes}: names must be unique")
    keys = {}
    for node in nodes:
        key = ec.generate_private_key(ec.SECP384R1())
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
        keys[node] = (_write(out / "keys" / node, private, private=True),
                      _write(out / "keys" / f"{node}.pub", public + b"\n"))
    return keys


def make_credentials(out: Path, nodes: list[str], hosts: list[str] | tuple[str, ...] = DEFAULT_HOSTS,
                     days: int = 365) -> Credentials:
    """Write a CA, a SuperLink certificate for ``hosts`` and one key pair per node into ``out``."""
    if not hosts:
        raise ValueError("hosts = []: the server certificate needs at least one host name or IP")
    if days < 1:
        raise ValueError(f"days = {days}: must be >= 1")
    node_keys = make_node_keys(out, nodes)
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(_name("f3ocus CA")).issuer_name(_name("f3ocus CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca_cert.subject)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(out / "ca.key", _pem_key(ca_key), private=True)
    return Credentials(
        ca_cert=_write(out / "ca.crt", ca_cert.public_bytes(pem)),
        server_cert=_write(out / "server.pem", server_cert.public_bytes(pem)),
        server_key=_write(out / "server.key", _pem_key(server_key), private=True),
        node_keys=node_keys,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--nodes", default="site-1,site-2",
                        help="comma-separated SuperNode names, one key pair each ('' for none)")
    parser.add_argument("--hosts", default=",".join(DEFAULT_HOSTS),
                        help="comma-separated IPs/DNS names the SuperLink is reached at")
    parser.add_argument("--days", type=int, default=365, help="validity in days")
    parser.add_argument("--keys-only", action="store_true",
                        help="only the SuperNode key pairs (what a site makes for itself)")
    args = parser.parse_args(argv)
    nodes = [n for n in args.nodes.split(",") if n]
    hosts = [h for h in args.hosts.split(",") if h]
    try:
        if args.keys_only:
            node_keys = make_node_keys(args.out, nodes)
        else:
            creds = make_credentials(args.out, nodes, hosts, args.days)
            node_keys = creds.node_keys
            print(f"CA certificate:     {creds.ca_cert}  (to every site and every flwr user)")
            print(f"SuperLink cert/key: {creds.server_cert} {creds.server_key}  (stay on the coordinator)")
    except ValueError as err:
        parser.error(str(err))
    for node, (private, public) in node_keys.items():
        print(f"SuperNode {node}: private {private} (stays at the site), public {public} (to register)")


if __name__ == "__main__":
    main()
