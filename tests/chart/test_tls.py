"""The certificates the chart renders actually work together.

An in-memory TLS handshake (no sockets) between the extender's real server
context (``extender.shell.tls.server_ssl_context`` over the files its Secret
volumes hold) and a client that trusts exactly the scheduler's ``caData`` and
checks ``tlsConfig.serverName``, as kube-scheduler's Go client does.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from extender.shell.tls import server_ssl_context

from .chartlib import CHART, Helm, Rendered

EXTENDER = "hugepage-extender"
SCHEDULER = f"{EXTENDER}-scheduler"


@dataclass(frozen=True)
class Material:
    ca_data: str  # what the scheduler trusts
    server_name: str
    server_cert: str
    server_key: str
    client_ca: str | None  # what the extender trusts for clients
    client_cert: str | None
    client_key: str | None


def secret_file(rendered: Rendered, name: str, key: str) -> str:
    return base64.b64decode(rendered.get("Secret", name)["data"][key]).decode()


def material(rendered: Rendered) -> Material:
    config = yaml.safe_load(rendered.get("ConfigMap", SCHEDULER)["data"]["scheduler-config.yaml"])
    tls = config["extenders"][0]["tlsConfig"]
    mtls = "certFile" in tls
    client = f"{EXTENDER}-client-tls"
    return Material(
        ca_data=base64.b64decode(tls["caData"]).decode(),
        # Loopback topologies name no serverName: the scheduler checks the address it dials.
        server_name=tls.get("serverName", "127.0.0.1"),
        server_cert=secret_file(rendered, f"{EXTENDER}-tls", "tls.crt"),
        server_key=secret_file(rendered, f"{EXTENDER}-tls", "tls.key"),
        client_ca=secret_file(rendered, client, "ca.crt") if mtls else None,
        client_cert=secret_file(rendered, client, "tls.crt") if mtls else None,
        client_key=secret_file(rendered, client, "tls.key") if mtls else None,
    )


def write(directory: Path, name: str, text: str | None) -> Path | None:
    if text is None:
        return None
    path = directory / name
    path.write_text(text)
    return path


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_name: str) -> None:
    """Run a TLS handshake through memory BIOs; raises ssl.SSLError on refusal."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, to_server, server_hostname=server_name)
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    client_done = server_done = False
    for _ in range(20):
        if not client_done:
            try:
                client_side.do_handshake()
                client_done = True
            except ssl.SSLWantReadError:
                pass
        server_in.write(to_server.read())
        if not server_done:
            try:
                server_side.do_handshake()
                server_done = True
            except ssl.SSLWantReadError:
                pass
        to_client.write(server_out.read())
        if client_done and server_done:
            # TLS 1.3 checks the client certificate after the client finished;
            # one round trip of application data surfaces a refusal.
            client_side.write(b"ping")
            server_in.write(to_server.read())
            assert server_side.read(4) == b"ping"
            return
    raise AssertionError("the handshake did not finish")


def contexts(tmp_path: Path, m: Material, *, present_client_cert: bool) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert = write(tmp_path, "tls.crt", m.server_cert)
    key = write(tmp_path, "tls.key", m.server_key)
    client_ca = write(tmp_path, "client-ca.crt", m.client_ca)
    server = server_ssl_context(cert, key, client_ca)
    assert server is not None
    client = ssl.create_default_context(cadata=m.ca_data)
    if present_client_cert and m.client_cert is not None:
        client_cert = write(tmp_path, "client.crt", m.client_cert)
        client_key = write(tmp_path, "client.key", m.client_key)
        assert client_cert is not None
        client.load_cert_chain(client_cert, client_key)
    return server, client


@pytest.mark.parametrize(
    "values",
    ["tls-generated-values.yaml", "mtls-generated-values.yaml", "tls-values-values.yaml", "loopback-tls-values.yaml"],
)
def test_scheduler_trusts_the_served_certificate(helm: Helm, tmp_path: Path, values: str) -> None:
    m = material(helm.template(values=[CHART / "ci" / values]))
    server, client = contexts(tmp_path, m, present_client_cert=True)
    handshake(server, client, m.server_name)


@pytest.mark.parametrize("values", ["mtls-generated-values.yaml", "tls-values-values.yaml", "loopback-tls-values.yaml"])
def test_extender_refuses_a_scheduler_without_its_client_certificate(helm: Helm, tmp_path: Path, values: str) -> None:
    m = material(helm.template(values=[CHART / "ci" / values]))
    assert m.client_cert is not None
    server, client = contexts(tmp_path, m, present_client_cert=False)
    with pytest.raises(ssl.SSLError):
        handshake(server, client, m.server_name)


def test_generated_certificate_names_the_pinned_cluster_ip(helm: Helm, tmp_path: Path) -> None:
    """In own mode the scheduler dials the clusterIP; the name it checks is still the Service's."""
    m = material(helm.template(values=[CHART / "ci" / "own-service-values.yaml"]))
    server, client = contexts(tmp_path, m, present_client_cert=True)
    handshake(server, client, m.server_name)
    server, client = contexts(tmp_path, m, present_client_cert=True)
    handshake(server, client, "10.96.0.88")


def test_a_different_ca_is_refused(helm: Helm, tmp_path: Path) -> None:
    """The check is real: caData from another render does not verify this certificate."""
    one = material(helm.template(values=[CHART / "ci" / "tls-generated-values.yaml"]))
    other = material(helm.template(values=[CHART / "ci" / "tls-generated-values.yaml"]))
    assert one.ca_data != other.ca_data  # generated afresh when no Secret exists
    server, _ = contexts(tmp_path, one, present_client_cert=False)
    client = ssl.create_default_context(cadata=other.ca_data)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, client, one.server_name)
