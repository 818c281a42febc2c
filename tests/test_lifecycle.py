"""The process's life: SIGTERM drains (readiness fails first, begun requests are answered),
renewed certificates are served without a restart and without a failed request."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.controlplane import generate_certificates
from tests.test_cli import free_port

BODY = json.dumps(
    {"Pod": {"metadata": {"name": "x", "namespace": "dpdk"}, "spec": {"containers": []}}, "NodeNames": ["hp-full"]}
).encode()


def serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "extender", "serve", "--example", "--port", str(port), *args],
            stdout=log,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return process, port


def wait_listening(process: subprocess.Popen[bytes], port: int, tmp_path: Path) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_fails_readiness_first_and_answers_requests_whose_body_is_still_arriving(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    process, port = serve(tmp_path, "--drain-seconds", "1", "--shutdown-timeout", "5")
    stopped.append(process)
    wait_listening(process, port, tmp_path)
    assert readyz(port) == 200
    head = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
    clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
    for client in clients:
        client.sendall(head + BODY[:10])  # the request has begun; its body is still arriving
    time.sleep(0.3)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert readyz(port) == 503  # readiness fails first, while the port still answers
    time.sleep(1.3)  # past the drain: the port is closed now, the begun requests go on
    for client in clients:
        client.sendall(BODY[10:])
    answered = 0
    for client in clients:
        answer = client.recv(65536)
        answered += answer.startswith(b"HTTP/1.1 200")
        client.close()
    assert answered == 20
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - started < 4  # it did not wait out its whole shutdown timeout


def _fingerprint(port: int, context: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


def test_a_renewed_certificate_is_served_without_a_restart_or_a_failed_request(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    old, new = generate_certificates(tmp_path / "old"), generate_certificates(tmp_path / "new")
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(old.serving_cert, live / "tls.crt")
    shutil.copy(old.serving_key, live / "tls.key")
    both = tmp_path / "both-cas.pem"
    both.write_bytes(old.ca_cert.read_bytes() + new.ca_cert.read_bytes())
    context = ssl.create_default_context(cafile=str(both))
    process, port = serve(
        tmp_path,
        *("--tls-cert-file", str(live / "tls.crt"), "--tls-key-file", str(live / "tls.key")),
        *("--tls-reload-seconds", "0.2"),
    )
    stopped.append(process)
    wait_listening(process, port, tmp_path)
    first = _fingerprint(port, context)

    failures: list[str] = []
    answered = 0
    done = threading.Event()

    def load() -> None:
        nonlocal answered
        while not done.is_set():
            request = urllib.request.Request(f"https://127.0.0.1:{port}/filter", data=BODY, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5, context=context) as response:
                    answered += response.status == 200
            except OSError as error:
                failures.append(repr(error))

    thread = threading.Thread(target=load)
    thread.start()
    try:
        time.sleep(0.5)
        # As a Secret volume renews: the key first, then the certificate (a moment of mismatch).
        shutil.copy(new.serving_key, live / "tls.key")
        time.sleep(0.5)
        shutil.copy(new.serving_cert, live / "tls.crt")
        deadline = time.monotonic() + 10
        while _fingerprint(port, context) == first:
            assert time.monotonic() < deadline, "the renewed certificate was not served"
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        done.set()
        thread.join()
    assert not failures, failures[:3]
    assert answered > 10
    assert process.poll() is None  # no restart


def test_the_verbs_listen_on_their_host_only_and_the_probe_port_on_its_own(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    # The chart's loopback topologies: the verbs on 127.0.0.1 beside the scheduler, probes
    # and metrics on every address for the kubelet and Prometheus. Here 127.0.0.2 stands in
    # for the pod's own address (both loopback: the test reaches nothing else).
    probe = free_port()
    process, port = serve(tmp_path, "--host", "127.0.0.1", "--probe-port", str(probe), "--probe-host", "0.0.0.0")  # noqa: S104 (the test)
    stopped.append(process)
    wait_listening(process, port, tmp_path)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=BODY, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    with urllib.request.urlopen(f"http://127.0.0.2:{probe}/healthz", timeout=2) as response:
        assert response.status == 200
    # The probe port serves no verb and no /debug/state.
    for path, data in (("/filter", BODY), ("/debug/state", None)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.2:{probe}{path}", data=data), timeout=2)
        refused.value.close()
        assert refused.value.code in {404, 405}, (path, refused.value.code)
    log = (tmp_path / "serve.log").read_text()
    assert f"on 127.0.0.1:{port} (http; probes and metrics on 0.0.0.0:{probe})" in log, log


def _client_answer(port: int, ca: Path, cert: tuple[Path, Path]) -> str:
    """ "200", or the TLS or connection error a client with ``cert`` meets."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(*cert)
    request = urllib.request.Request(f"https://127.0.0.1:{port}/filter", data=BODY, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return str(response.status)
    except (OSError, ssl.SSLError) as error:
        return repr(error)


def test_a_client_ca_removed_from_the_file_is_no_longer_trusted(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    """Issue 22, finding 6: a renewed server certificate was picked up, but a client CA removed
    from the file stayed trusted until a restart (an SSLContext can only add CAs)."""
    ours, retired = generate_certificates(tmp_path / "ours"), generate_certificates(tmp_path / "retired")
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(ours.ca_cert.read_bytes() + retired.ca_cert.read_bytes())
    process, port = serve(
        tmp_path,
        *("--tls-cert-file", str(ours.serving_cert), "--tls-key-file", str(ours.serving_key)),
        *("--client-ca-file", str(client_ca), "--tls-reload-seconds", "0.2"),
    )
    stopped.append(process)
    wait_listening(process, port, tmp_path)
    retired_client = (retired.admin_cert, retired.admin_key)
    our_client = (ours.admin_cert, ours.admin_key)
    assert _client_answer(port, ours.ca_cert, retired_client) == "200"
    client_ca.write_bytes(ours.ca_cert.read_bytes())  # the retired CA is taken out
    deadline = time.monotonic() + 10
    while _client_answer(port, ours.ca_cert, retired_client) == "200":
        assert time.monotonic() < deadline, "the removed client CA is still trusted"
        time.sleep(0.2)
    assert _client_answer(port, ours.ca_cert, our_client) == "200"
    assert process.poll() is None  # no restart


def test_shutdown_ends_within_drain_plus_shutdown_timeout_with_bodies_still_arriving(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    """Issue 22, finding 5: bodies still arriving made exit take drain + 2 x --shutdown-timeout
    (23.5 s against the 15 s the chart checks against the grace period)."""
    process, port = serve(tmp_path, "--drain-seconds", "1", "--shutdown-timeout", "2")
    stopped.append(process)
    wait_listening(process, port, tmp_path)
    head = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
    clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(5)]
    for client in clients:
        client.sendall(head + BODY[:10])  # and never the rest
    time.sleep(0.3)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    took = time.monotonic() - started
    assert took < 1 + 2 + 0.5, f"exit took {took:.1f} s"
    for client in clients:
        client.close()


def _resumed_answer(
    port: int, context: ssl.SSLContext, session: ssl.SSLSession | None
) -> tuple[str, ssl.SSLSession | None]:
    """What a GET /healthz gets on a connection offering ``session`` to resume ("200 reused" when the
    server resumed it), and the connection's session."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as tls,
        ):
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := tls.recv(4096):
                answer += chunk
            status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else repr(answer[:40])
            return f"{status}{' reused' if tls.session_reused else ''}", tls.session
    except (OSError, ssl.SSLError) as error:
        return repr(error), None


def test_a_client_whose_ca_was_removed_cannot_resume_its_earlier_session(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    """Issue 29: after the client CA was rotated, a client whose CA was removed failed a full
    handshake but resumed its earlier TLS session, and kept resuming (40 s later still a 200).
    Sessions are never resumed now (no tickets; TLS 1.3, which resumes by tickets alone, with mTLS)."""
    ours, retired = generate_certificates(tmp_path / "ours"), generate_certificates(tmp_path / "retired")
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(ours.ca_cert.read_bytes() + retired.ca_cert.read_bytes())
    process, port = serve(
        tmp_path,
        *("--tls-cert-file", str(ours.serving_cert), "--tls-key-file", str(ours.serving_key)),
        *("--client-ca-file", str(client_ca), "--tls-reload-seconds", "0.2"),
    )
    stopped.append(process)
    wait_listening(process, port, tmp_path)
    contexts = {}
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context = contexts[version] = ssl.create_default_context(cafile=str(ours.ca_cert))
        context.load_cert_chain(retired.admin_cert, retired.admin_key)
        context.maximum_version = version
    # TLS 1.2 would resume by session ID from the server's cache: refused with mTLS.
    assert "SSL" in _resumed_answer(port, contexts[ssl.TLSVersion.TLSv1_2], None)[0]
    tls13 = contexts[ssl.TLSVersion.TLSv1_3]
    answer, session = _resumed_answer(port, tls13, None)
    assert answer == "200"
    assert session is not None
    assert _resumed_answer(port, tls13, session)[0] == "200"  # a full handshake again, not a resumption
    client_ca.write_bytes(ours.ca_cert.read_bytes())  # the retired CA is taken out
    deadline = time.monotonic() + 10
    while _resumed_answer(port, tls13, None)[0] == "200":
        assert time.monotonic() - deadline < 0, "the removed client CA is still trusted"
        time.sleep(0.2)
    for _ in range(3):
        assert not _resumed_answer(port, tls13, session)[0].startswith("200")
    assert process.poll() is None
