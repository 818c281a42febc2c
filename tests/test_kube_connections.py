"""The API writes made on the request path reuse their connections.

An answer read with ``_preload_content=False`` and never read to its end keeps its connection out of
urllib3's pool: every write then opens a connection of its own (on a real API server, a TLS handshake
each). Here a keep-alive HTTP server counts the connections that binds, lifts and nudges arrive on.
"""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from extender.core.binding import BindingArgs
from extender.core.gates import gated_pod
from extender.shell.kube.binder import ApiBinder
from extender.shell.kube.gatelift import GateWriter
from extender.shell.kube.nudge import PodNudger
from extender.shell.metrics import Metrics
from tests.conftest import make_state
from tests.test_gates import gated

WRITES = 5


class _Counting(ThreadingHTTPServer):
    connections = 0
    requests: list[str]

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1
        super().process_request(request, client_address)


class _Answers(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a connection serves every request its client sends
    server: _Counting

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append(f"{self.command} {self.path}")
        body = b'{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}}'
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PATCH = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Counting]:
    httpd = _Counting(("127.0.0.1", 0), _Answers)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _api(server: _Counting) -> client.ApiClient:
    host, port = server.server_address[:2]
    return client.ApiClient(client.Configuration(host=f"http://{host!s}:{port}"))


def test_binds_share_one_connection(server: _Counting) -> None:
    binder = ApiBinder(_api(server))
    try:
        for i in range(WRITES):
            binder._bind(BindingArgs(f"p{i}", "ns", f"uid-{i}", "node-a"))  # what bind runs in its thread pool
    finally:
        binder.close()
    assert server.requests == [f"POST /api/v1/namespaces/ns/pods/p{i}/binding" for i in range(WRITES)]
    assert server.connections == 1


def test_lifts_share_one_connection(server: _Counting) -> None:
    writer = GateWriter(_api(server), Metrics())
    pod = gated("p")
    lift = gated_pod(pod, make_state({}, []).demand_of(pod))
    assert lift is not None
    try:
        for _ in range(WRITES):
            writer._patch(lift)
    finally:
        writer.close()
    assert server.requests == ["PATCH /api/v1/namespaces/default/pods/p"] * WRITES
    assert server.connections == 1


def test_nudges_share_one_connection(server: _Counting) -> None:
    nudger = PodNudger(_api(server), "kube-system", "nudge")
    try:
        assert all(nudger._patch() for _ in range(WRITES))
    finally:
        nudger.close()
    assert server.requests == ["PATCH /api/v1/namespaces/kube-system/pods/nudge"] * WRITES
    assert server.connections == 1
