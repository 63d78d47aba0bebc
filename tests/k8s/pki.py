"""Certificates and kubeconfigs of the test environment: a CA, the API server's serving
certificate, client certificates (user = CN, groups = O), the service-account key pair."""

from __future__ import annotations

import datetime as dt
import ipaddress
from base64 import b64encode
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def pem_key(key: Any) -> bytes:

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def certificate(
    subject: str,
    groups: Sequence[str] = (),
    *,
    issuer: tuple[Any, Any] | None = None,
    hosts: Sequence[str] = (),
    client: bool = False,
) -> tuple[Any, Any]:
    """An ECDSA P-256 key and a certificate for it, signed by ``issuer`` (else self-signed)."""

    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, subject))
    name = x509.Name(attributes)
    signer_cert, signer_key = issuer if issuer else (None, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(signer_cert.subject if signer_cert else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        builder = builder.add_extension(
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
            True,
        )
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), False)
    return builder.sign(signer_key, hashes.SHA256()), key


def write_pki(pki: Path) -> None:
    """CA, serving certificate, client certificates and the service-account key pair."""

    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    ca = certificate("dra-jupyter-testenv-ca")

    def save(name: str, pair: tuple[Any, Any]) -> None:
        cert, key = pair
        (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (pki / f"{name}.key").write_bytes(pem_key(key))

    save("ca", ca)
    hosts = ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "10.96.0.1")
    save("serving", certificate("kube-apiserver", issuer=ca, hosts=hosts))
    for name, cn, groups in (
        ("admin", "dra-jupyter-testenv-admin", ["system:masters"]),
        ("kube-scheduler", "system:kube-scheduler", []),
        ("kube-controller-manager", "system:kube-controller-manager", []),
        # the API server's, to the stand-in kubelet's log endpoint (tests/k8s/podrunner.py)
        ("kubelet-client", "kube-apiserver-kubelet-client", []),
    ):
        save(name, certificate(cn, groups, issuer=ca, client=True))
    sa = ec.generate_private_key(ec.SECP256R1())
    (pki / "sa.key").write_bytes(pem_key(sa))
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def kubeconfig(server: str, pki: Path, user: str) -> dict[str, Any]:
    """A kubeconfig with the CA and the client certificate embedded (portable)."""

    def data(name: str) -> str:
        return b64encode((pki / name).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testenv",
                "cluster": {"server": server, "certificate-authority-data": data("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(f"{user}.crt"),
                    "client-key-data": data(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": user}}],
        "current-context": "testenv",
    }


def issue_client(pki: Path, user: str, groups: Sequence[str] = ()) -> None:
    """``<user>.crt`` and ``<user>.key`` in ``pki``, signed by its CA."""
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    cert, key = certificate(user, groups, issuer=(ca_cert, ca_key), client=True)
    (pki / f"{user}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (pki / f"{user}.key").write_bytes(pem_key(key))


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> Path:
    """``kubeconfig(...)`` as YAML at ``path``, readable by its owner only."""
    import yaml  # noqa: PLC0415

    path.write_text(yaml.safe_dump(kubeconfig(server, pki, user)))
    path.chmod(0o600)
    return path
