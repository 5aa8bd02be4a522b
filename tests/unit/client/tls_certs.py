"""Certificates for the TLS tests, made in the test's tmp_path: a CA, a server certificate for 127.0.0.1 and
localhost signed by it, a client certificate (mTLS) and an unrelated CA (the wrong one). Needs `cryptography`;
without it the tests that ask for certificates skip, saying so."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    """PEM files: the CA, the server's certificate and key, a client certificate and key, and a wrong CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path


def make_certs(where: Path) -> Certs:
    """Write a fresh set of certificates under `where` (skips the test when `cryptography` is missing)."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        pytest.skip(
            "TLS tests need the `cryptography` package to make certificates (pip install cryptography)"
        )

    now = datetime.datetime.now(datetime.timezone.utc)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(
        subject: str,
        k: ec.EllipticCurvePrivateKey,
        issuer: str,
        ik: ec.EllipticCurvePrivateKey,
        *,
        ca: bool,
        usage: x509.ObjectIdentifier | None = None,
        sans: list[x509.GeneralName] | None = None,
    ) -> x509.Certificate:
        b = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            b = b.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(k.public_key()), critical=False)
        else:
            b = b.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ik.public_key()), critical=False
            )
        if usage is not None:
            b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(ik, hashes.SHA256())

    def write(path: Path, *items: object) -> Path:
        out = b""
        for item in items:
            if isinstance(item, x509.Certificate):
                out += item.public_bytes(serialization.Encoding.PEM)
            else:
                out += item.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,  # type: ignore[attr-defined]
                    serialization.NoEncryption(),
                )
        path.write_bytes(out)
        return path

    where.mkdir(parents=True, exist_ok=True)
    ca_key, wrong_key, server_key, client_key = key(), key(), key(), key()
    ca = cert("vllm-locust test CA", ca_key, "vllm-locust test CA", ca_key, ca=True)
    wrong = cert("some other CA", wrong_key, "some other CA", wrong_key, ca=True)
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server = cert(
        "127.0.0.1",
        server_key,
        "vllm-locust test CA",
        ca_key,
        ca=False,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=sans,
    )
    client = cert(
        "load generator",
        client_key,
        "vllm-locust test CA",
        ca_key,
        ca=False,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    return Certs(
        ca=write(where / "ca.pem", ca),
        server_cert=write(where / "server.pem", server),
        server_key=write(where / "server.key", server_key),
        client_cert=write(where / "client.pem", client),
        client_key=write(where / "client.key", client_key),
        wrong_ca=write(where / "wrong-ca.pem", wrong),
    )
