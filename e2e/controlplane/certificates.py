"""The control plane's certificates and kubeconfigs, made with the ``openssl`` command."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.controlplane.errors import ControlPlaneError


@dataclass(frozen=True)
class Certificates:
    """PEM files: one CA signs the apiserver's serving cert and every client cert.

    ``front_proxy_ca_cert`` (--requestheader-client-ca-file) signs nothing: it is there
    so kube-scheduler's delegated authentication finds a request-header CA in
    kube-system/extension-apiserver-authentication instead of logging an error every
    second, without letting any client cert assert identities through headers.
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    front_proxy_ca_cert: Path


_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost, IP:10.0.0.1, DNS:kubernetes, DNS:kubernetes.default, \
DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""


def _openssl(*args: str | Path) -> None:
    command = ["openssl", *(str(a) for a in args)]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise ControlPlaneError("the openssl command is needed to make the control plane's certificates") from None
    except subprocess.CalledProcessError as error:
        stderr = error.stderr.decode(errors="replace")
        raise ControlPlaneError(f"{' '.join(command)} failed: {stderr}") from None


def _ec_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    path.chmod(0o600)


def _subject(common_name: str, organizations: Sequence[str] = ()) -> str:
    def esc(value: str) -> str:
        return value.replace("\\", "\\\\").replace("/", "\\/").replace("=", "\\=")

    return "".join(f"/O={esc(o)}" for o in organizations) + f"/CN={esc(common_name)}"


def _sign(certs_dir: Path, stem: str, subject: str, extensions: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    ca_cert, ca_key = ca
    key, csr, cert = certs_dir / f"{stem}.key", certs_dir / f"{stem}.csr", certs_dir / f"{stem}.crt"
    config = certs_dir / "openssl.cnf"
    _ec_key(key)
    _openssl("req", "-new", "-key", key, "-subj", subject, "-config", config, "-out", csr)
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
        "-set_serial", str(secrets.randbits(62)), "-days", "3650", "-sha256",
        "-extfile", config, "-extensions", extensions, "-out", cert,
    )  # fmt: skip
    csr.unlink()
    return cert, key


def _self_signed_ca(directory: Path, stem: str, common_name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    _ec_key(key)
    _openssl(
        "req", "-x509", "-new", "-key", key, "-subj", f"/CN={common_name}",
        "-days", "3650", "-sha256", "-config", directory / "openssl.cnf", "-extensions", "ca", "-out", cert,
    )  # fmt: skip
    return cert, key


def generate_certificates(directory: Path) -> Certificates:
    """A CA, the apiserver serving cert (127.0.0.1, localhost), an admin client cert
    (O=system:masters) and an RSA service-account key, all under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "openssl.cnf").write_text(_OPENSSL_CONFIG)
    ca_cert, ca_key = _self_signed_ca(directory, "ca", "hugepage-extender-e2e-ca")
    front_proxy_ca, _ = _self_signed_ca(directory, "front-proxy-ca", "hugepage-extender-e2e-front-proxy-ca")
    serving_cert, serving_key = _sign(directory, "apiserver", "/CN=kube-apiserver", "server", (ca_cert, ca_key))
    admin_cert, admin_key = _sign(
        directory, "admin", _subject("kubernetes-admin", ["system:masters"]), "client", (ca_cert, ca_key)
    )
    sa_key = directory / "service-account.key"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", sa_key)
    sa_key.chmod(0o600)
    return Certificates(
        directory, ca_cert, ca_key, serving_cert, serving_key, admin_cert, admin_key, sa_key, front_proxy_ca
    )


def issue_client_certificate(certs: Certificates, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
    """A client cert and key for ``user`` in ``groups`` (the apiserver trusts the CA)."""
    stem = "user-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
    return _sign(certs.directory, stem, _subject(user, groups), "client", (certs.ca_cert, certs.ca_key))


def write_kubeconfig(
    path: Path, server: str, ca_cert: Path, client_cert: tuple[Path, Path], user: str = "admin"
) -> Path:
    """A kubeconfig for ``server`` authenticating with the (cert, key) pair ``client_cert``."""
    cert, key = client_cert
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path
