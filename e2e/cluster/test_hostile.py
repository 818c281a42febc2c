"""Issue 11 on the real control plane: a dying API server, bad annotations, the bind verb's
authority and made-up holds, each through a live extender (and the real kube-scheduler)."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from e2e.cluster.placement_support import (
    Cell,
    metric_value,
    write_extender_config,
)
from e2e.controlplane import ControlPlane, Service, free_port, wait_until, write_kubeconfig
from extender.state.verbs import UNVERIFIED_HOLD_SECONDS

pytestmark = pytest.mark.cluster


class Proxy:
    """A TCP proxy to the API server that can vanish and come back on the same port:
    the API server as the extender sees it dies, while the shared control plane lives on."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self._target = target_port
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            if self._listener is not None:
                with contextlib.suppress(OSError):
                    self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
                self._listener.close()
                self._listener = None
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[Proxy]:
    port = int(control_plane.apiserver_url.rsplit(":", 1)[1])
    p = Proxy(port)
    p.start()
    yield p
    p.stop()


class EmptyWatches:
    """An HTTPS front of the API server that answers every watch with an empty 200 at once (a
    misbehaving proxy), and passes every other request through with the admin's identity."""

    def __init__(self, plane: ControlPlane) -> None:
        certs = plane.certificates
        upstream = ssl.create_default_context(cafile=str(certs.ca_cert))
        upstream.load_cert_chain(certs.admin_cert, certs.admin_key)
        target = plane.apiserver_url
        self.watches = 0
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                if query.get("watch", [""])[0] in ("true", "1"):
                    front.watches += 1
                    status, body, kind = 200, b"", "application/json"
                else:
                    request = urllib.request.Request(target + self.path, headers={"Accept": "application/json"})
                    try:
                        with urllib.request.urlopen(request, timeout=30, context=upstream) as answer:
                            status, body, kind = answer.status, answer.read(), answer.headers["Content-Type"]
                    except urllib.error.HTTPError as error:
                        status, body, kind = error.code, error.read(), error.headers["Content-Type"]
                self.send_response(status)
                self.send_header("Content-Type", kind or "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(certs.serving_cert, certs.serving_key)
        self.server.socket = serving.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_watches_that_end_at_once_back_off_and_make_the_extender_unready(cell: Cell, tmp_path: Path) -> None:
    """Issue 22, finding 4: an API server (or proxy) answering each watch with an empty 200 was
    re-watched about 2,700 times a second at 85% CPU, and /readyz stayed ok."""
    front = EmptyWatches(cell.plane)
    try:
        certs = cell.plane.certificates
        kubeconfig = write_kubeconfig(
            tmp_path / "empty-watches.kubeconfig",
            f"https://127.0.0.1:{front.port}",
            certs.ca_cert,
            (certs.admin_cert, certs.admin_key),
        )
        config = write_extender_config(tmp_path, {"defaults": {"mode": "enforce"}})
        extender = cell.start_extender(
            ["--kubeconfig", str(kubeconfig), "--config", str(config), *FAST_STALENESS, "--no-node-reports"],
            name=f"extender-{cell.slug}",
            ready_path="/healthz",
            timeout=60,
        )
        wait_until("the first lists", lambda: front.watches >= 2, timeout=60)
        counted, since = front.watches, time.monotonic()
        wait_until("the extender to turn unready", lambda: readyz(extender) == 503, timeout=30)
        answer = extender.get("/readyz")
        time.sleep(max(0.0, 5 - (time.monotonic() - since)))
        rate = (front.watches - counted) / (time.monotonic() - since)
    finally:
        front.close()
    assert rate < 5, f"{rate:.0f} watches a second"  # two watches, each backing off from 0.8 s
    assert answer is not None
    assert answer[0] == 503
    assert b"very short watch" in answer[1]


def post(service: Service, verb: str, body: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{service.url}/{verb}", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": JSON}
    )
    try:
        with urllib.request.urlopen(request, timeout=180) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


JSON = "application/json"
FAST_STALENESS = ["--watch-stale-seconds", "4", "--watch-timeout-seconds", "1"]


def pod_body(name: str, namespace: str, uid: str, hugepages: str = "512Mi") -> dict[str, Any]:
    requests = {"hugepages-2Mi": hugepages, "cpu": "100m"}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
    }


def pod_uid(cell: Cell, name: str) -> str:
    return str(cell.core.read_namespaced_pod(name, cell.namespace).metadata.uid)  # type: ignore[union-attr]


def readyz(service: Service) -> int:
    answer = service.get("/readyz")
    return 0 if answer is None else answer[0]


def test_a_vanished_api_server_makes_the_extender_unready_and_filter_answer_an_error(
    cell: Cell, proxy: Proxy, tmp_path: Path
) -> None:
    node = cell.node("a")
    certs = cell.plane.certificates
    kubeconfig = write_kubeconfig(
        tmp_path / "via-proxy.kubeconfig",
        f"https://127.0.0.1:{proxy.port}",
        certs.ca_cert,
        (certs.admin_cert, certs.admin_key),
    )
    config = write_extender_config(tmp_path, {"defaults": {"mode": "enforce"}})
    extender = cell.start_extender(
        [
            "--kubeconfig",
            str(kubeconfig),
            "--config",
            str(config),
            "--watch-stale-seconds",
            "4",
            "--watch-timeout-seconds",
            "1",
        ],
        name=f"extender-{cell.slug}",
        ready_path="/readyz",
        timeout=60,
    )
    body = {"Pod": pod_body("p", cell.namespace, "u-1"), "NodeNames": [node]}
    assert post(extender, "filter", body)[1]["NodeNames"] == [node]
    time.sleep(5)  # an idle but healthy watch stays ready (it restarts every second)
    assert readyz(extender) == 200

    proxy.stop()
    stopped = time.monotonic()
    wait_until("the extender to turn unready", lambda: readyz(extender) == 503, timeout=180)
    assert time.monotonic() - stopped < 15
    status, answer = post(extender, "filter", body)
    assert status == 200
    assert "no progress" in answer["Error"]
    assert not answer["NodeNames"]
    assert metric_value(extender, "hugepage_extender_ready") == 0
    ages = [
        metric_value(extender, "hugepage_extender_watch_progress_age_seconds", {"resource": r})
        for r in ("nodes", "pods")
    ]
    assert max(ages) > 4
    assert metric_value(extender, "hugepage_extender_watch_failures_total") > 0

    proxy.start()  # the API server is back: ready again, without a restart
    wait_until("the extender to turn ready again", lambda: readyz(extender) == 200, timeout=180)
    assert post(extender, "filter", body)[1]["NodeNames"] == [node]
    assert metric_value(extender, "hugepage_extender_watch_relists_total", {"resource": "nodes"}) >= 1


def test_a_bad_annotation_is_ignored_on_its_node_only(cell: Cell) -> None:
    good = cell.node("good", hugepages="1Gi")
    nan = cell.node("nan", hugepages="1Gi", reserved="NaN")
    huge = cell.node("huge", hugepages="1Gi", reserved="1e999999")
    started = time.monotonic()
    # With its nudge, as the chart runs it: the first pod's hold covers all three pools until the
    # watch shows it bound, so a pod filtered in that gap is turned away; the released hold's nudge,
    # not an event that may never come, sends it back.
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce", "sampleSize": 3}}}, nudge=True)
    assert time.monotonic() - started < 30  # synced: the bad values neither stall nor repeat the list
    scheduler = cell.scheduler(extender)
    names = cell.pods([f"p-{i}" for i in range(3)], scheduler, hugepages_2mi="1Gi")
    placed = cell.plane.wait_for_pods_bound(cell.namespace, names, timeout=180)
    assert sorted(placed.values()) == sorted([good, nan, huge])  # each pool counted whole
    cell.core.patch_node(good, {"metadata": {"annotations": {"hugepage-extender.io/reserved-hugepages-2Mi": "inf"}}})
    time.sleep(1)
    assert readyz(extender) == 200
    log = extender.process.log_tail(200)
    assert "annotation hugepage-extender.io/reserved-hugepages-2Mi ignored" in log
    assert "Traceback" not in log


def test_bind_binds_only_a_pod_filtered_to_a_node_admitted_with_its_uid(cell: Cell) -> None:
    roomy = cell.node("roomy", hugepages="1Gi")
    small = cell.node("small", hugepages="256Mi")
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce"}}}, enable_bind=True)
    victim = cell.pod("victim", "no-such-scheduler", hugepages_2mi="512Mi")  # nobody else binds it
    uid = pod_uid(cell, victim)

    def bind(namespace: str, name: str, pod_uid: str, node: str) -> tuple[int, dict[str, Any]]:
        return post(extender, "bind", {"PodName": name, "PodNamespace": namespace, "PodUID": pod_uid, "Node": node})

    # Never filtered: refused.
    assert "has not filtered" in bind(cell.namespace, victim, uid, roomy)[1]["Error"]
    # An empty UID would drop the precondition: a 400.
    assert bind(cell.namespace, victim, "", roomy)[0] == 400
    # Filtered (as the scheduler does): only the admitted node, only this pod.
    filtered = post(extender, "filter", {"Pod": pod_body(victim, cell.namespace, uid), "NodeNames": [roomy, small]})
    assert filtered[1]["NodeNames"] == [roomy]
    assert bind(cell.namespace, victim, uid, small)[1]["Error"]
    assert bind("kube-system", victim, uid, roomy)[1]["Error"]
    assert cell.plane.pod_assignments(cell.namespace)[victim] is None
    status, answer = bind(cell.namespace, victim, uid, roomy)
    assert (status, answer["Error"]) == (200, "")
    assert cell.plane.pod_assignments(cell.namespace)[victim] == roomy
    assert metric_value(extender, "hugepage_extender_binds_total", {"result": "refused"}) >= 3

    # The UID precondition: a pod recreated under the same name is not bound by the old decision.
    again = cell.pod("again", "no-such-scheduler", hugepages_2mi="512Mi")
    old_uid = pod_uid(cell, again)
    post(extender, "filter", {"Pod": pod_body(again, cell.namespace, old_uid), "NodeNames": [roomy]})
    cell.core.delete_namespaced_pod(again, cell.namespace, grace_period_seconds=0)
    wait_until("the pod gone", lambda: again not in cell.plane.pod_assignments(cell.namespace), timeout=180)
    cell.pod("again", "no-such-scheduler", hugepages_2mi="512Mi")
    assert bind(cell.namespace, again, old_uid, roomy)[1]["Error"]
    assert cell.plane.pod_assignments(cell.namespace)[again] is None


def test_made_up_pods_cannot_keep_a_real_pod_off_the_pools(cell: Cell) -> None:
    nodes = [cell.node(f"n{i}", hugepages="1Gi") for i in range(6)]
    extender = cell.extender({"namespaces": {cell.namespace: {"mode": "enforce", "sampleSize": 3}}})
    scheduler = cell.scheduler(extender)
    stop = threading.Event()

    def attack() -> None:
        # Five made-up 1Gi pods, filtered again and again (the attack, renewed).
        i = 0
        while not stop.is_set():
            for j in range(5):
                fake = pod_body(f"fake-{j}", cell.namespace, f"fake-uid-{i}-{j}", hugepages="1Gi")
                post(extender, "filter", {"Pod": fake, "NodeNames": nodes})
            i += 1
            time.sleep(1)

    thread = threading.Thread(target=attack)
    thread.start()
    try:
        time.sleep(1)
        name = cell.pod("real", scheduler, hugepages_2mi="1Gi")
        cell.plane.wait_for_pod_bound(cell.namespace, name, timeout=180)
    finally:
        stop.set()
        thread.join()
    time.sleep(UNVERIFIED_HOLD_SECONDS + 0.5)
    post(extender, "filter", {"Pod": pod_body("any", cell.namespace, "any-uid"), "NodeNames": nodes})
    assert metric_value(extender, "hugepage_extender_holds_refused_total") > 0  # the fakes' holds, dropped
    assert msgspec.json.encode(nodes)  # the six pools were the candidates


def test_a_made_up_demand_for_a_real_pending_pod_neither_admits_nor_binds_it(cell: Cell) -> None:
    """Issue 22, finding 7: whoever reaches the verbs named another tenant's Pending pod with a
    made-up demand and had it bound anywhere. The watch shows the pod: its real need decides."""
    roomy = cell.node("roomy", hugepages="1Gi")
    small = cell.node("small", hugepages="256Mi")
    tenant = cell.new_namespace("tenant")
    extender = cell.extender({"namespaces": {tenant: {"mode": "enforce"}}}, enable_bind=True)
    victim = cell.pod("victim", "no-such-scheduler", namespace=tenant, hugepages_2mi="512Mi")
    uid = str(cell.core.read_namespaced_pod(victim, tenant).metadata.uid)  # type: ignore[union-attr]
    made_up = {"Pod": pod_body(victim, tenant, uid, hugepages="0"), "NodeNames": [roomy, small]}
    # Once the watch shows the pod, its 512Mi decide: the 256Mi pool is not admitted.
    wait_until(
        "filter to decide by the watch's pod",
        lambda: post(extender, "filter", made_up)[1]["NodeNames"] == [roomy],
        timeout=30,
    )
    answer = post(extender, "bind", {"PodName": victim, "PodNamespace": tenant, "PodUID": uid, "Node": small})[1]
    assert "not one this extender's filter admitted" in answer["Error"]
    assert cell.plane.pod_assignments(tenant)[victim] is None
