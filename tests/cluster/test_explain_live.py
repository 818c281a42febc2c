""" "Why is my pod Pending?" answered against the real control plane.

A real kube-scheduler calls the extender over mutual TLS; another scheduler's placement
is in flight on the one node that would otherwise fit; the pod waits. Then the commands an
operator runs: ``hugepage-extender explain --kubeconfig`` and ``kubectl-hugepages explain``
(the executable ``kubectl hugepages`` runs), as subprocesses, print why, including the hold.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes import client

from e2e.controlplane import (
    ManagedProcess,
    free_port,
    http_get,
    issue_client_certificate,
    wait_until,
)
from tests.cluster.placement_support import (
    EXTENDER_REASON_INSUFFICIENT,
    Cell,
    placement_scheduler_config,
    wait_for_event,
    write_extender_config,
)

pytestmark = pytest.mark.cluster
BIN = Path(sys.executable).parent
MI = 1 << 20


@dataclass
class TLSExtender:
    """``hugepage-extender serve`` over HTTPS requiring client certificates, as the chart runs it."""

    url: str
    probe_port: int
    ca: Path
    client: tuple[Path, Path]
    process: ManagedProcess

    def extender_flags(self) -> list[str]:
        cert, key = self.client
        return [
            "--extender",
            self.url,
            "--extender-ca-file",
            str(self.ca),
            "--extender-cert-file",
            str(cert),
            "--extender-key-file",
            str(key),
        ]


@pytest.fixture
def tls_extender(cell: Cell) -> Iterator[TLSExtender]:
    plane = cell.plane
    certs = plane.certificates
    config = write_extender_config(
        cell.tmp_path,
        # Holds last long enough for the test to look at them.
        {"namespaces": {cell.namespace: {"mode": "enforce", "holdTimeoutSeconds": 300}}},
    )
    port, probe = free_port(), free_port()
    argv = [
        str(BIN / "hugepage-extender"),
        "serve",
        "--kubeconfig",
        str(plane.kubeconfig),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--probe-port",
        str(probe),
        "--tls-cert-file",
        str(certs.serving_cert),  # names 127.0.0.1
        "--tls-key-file",
        str(certs.serving_key),
        "--client-ca-file",
        str(certs.ca_cert),
    ]

    def ready() -> bool:
        answer = http_get(probe, "/readyz")
        return answer is not None and answer[0] == 200

    process = plane.start_process(f"extender-tls-{cell.slug}", argv, ready=ready, timeout=180)
    try:
        client = issue_client_certificate(certs, "hugepage-scheduler")
        yield TLSExtender(f"https://127.0.0.1:{port}", probe, certs.ca_cert, client, process)
    finally:
        process.stop()


def run(command: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(BIN / command), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{command} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def hold_in_flight(extender: TLSExtender, pod: Mapping[str, Any], node: str) -> None:
    """What another scheduler sharing the extender does: a filter call that admits ``node``,
    so the pod's need is held there until the pod shows up bound (it never will here)."""
    cert, key = extender.client
    body = msgspec.json.encode({"Pod": pod, "NodeNames": [node]})
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "--fail",
            "--cacert",
            str(extender.ca),
            "--cert",
            str(cert),
            "--key",
            str(key),
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
            f"{extender.url}/filter",
        ],
        input=body,
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert msgspec.json.decode(done.stdout)["NodeNames"] == [node]


def test_a_pending_pod_explained_live_with_the_hold_in_flight(cell: Cell, tls_extender: TLSExtender) -> None:
    plane = cell.plane
    roomy = cell.node("roomy", hugepages="1Gi")
    full = cell.node("full", hugepages="1Gi", reserved="1Gi")  # held outside pods: only the extender sees it
    cert, key = tls_extender.client
    scheduler = f"hp-{cell.slug}"
    config = placement_scheduler_config(tls_extender.url, scheduler_name=scheduler)
    config["extenders"][0]["tlsConfig"] = {"certFile": str(cert), "keyFile": str(key), "caFile": str(tls_extender.ca)}
    cell.start_scheduler(config, name=scheduler)

    # Another scheduler's placement: 768Mi held on "roomy", its pod never bound.
    plane.create_pod(
        cell.namespace, "vm-elsewhere", scheduler_name="elsewhere", hugepages_2mi="768Mi", node_selector=cell.selector
    )
    raw: Any = plane.core.read_namespaced_pod("vm-elsewhere", cell.namespace, _preload_content=False)
    hold_in_flight(tls_extender, msgspec.json.decode(raw.data), roomy)

    # 512Mi: "roomy" would hold it (1Gi, nothing bound) but for the hold; "full" never can.
    cell.pod("web", scheduler, hugepages_2mi="512Mi")
    wait_for_event(cell.core, cell.namespace, "web", "FailedScheduling", contains=EXTENDER_REASON_INSUFFICIENT)
    assert plane.pod_assignments(cell.namespace)["web"] is None

    pod = f"{cell.namespace}/web"
    nodes = f"{roomy},{full}"
    kubeconfig = str(plane.kubeconfig)

    # 1. hugepage-extender explain --kubeconfig, with the running extender's state.
    out = run(
        "hugepage-extender",
        "explain",
        "--kubeconfig",
        kubeconfig,
        "--pod",
        pod,
        "--nodes",
        nodes,
        *tls_extender.extender_flags(),
    )
    print(out)
    table = {line.split()[0]: line for line in out.splitlines() if line.startswith(cell.slug)}
    assert "insufficient (in flight)" in table[roomy]
    assert "held outside pods" in table[full]
    assert "(in flight)" not in table[full]
    assert f"in flight: the extender at {tls_extender.url}: 1 hold(s) on these nodes" in out
    assert "mode enforce" in out.splitlines()[0]
    assert out.rstrip().splitlines()[-1].startswith("no node can hold the pod now: 1 would, but placements in flight")

    as_json = json.loads(
        run(
            "hugepage-extender",
            "explain",
            "--kubeconfig",
            kubeconfig,
            "--pod",
            pod,
            "--nodes",
            nodes,
            "--output",
            "json",
            *tls_extender.extender_flags(),
        )
    )
    rows = {n["node"]: n for n in as_json["nodes"]}
    # 1Gi pool = 512 pages; nothing bound; 768Mi in flight = 384 pages; the pod needs 256 pages.
    assert (rows[roomy]["pool_pages"], rows[roomy]["used_pages"], rows[roomy]["inflight_pages"]) == (512, 0, 384)
    assert (rows[roomy]["free_pages"], rows[roomy]["need_pages"]) == (128, 256)
    assert rows[roomy]["blocked_by_inflight"] is True
    assert (rows[full]["reserved_pages"], rows[full]["verdict"]) == (512, "held outside pods")
    assert as_json["mode"] == "enforce"

    # Without the extender the hold is unknown: "roomy" looks free, and the output says what is missing.
    blind = run("hugepage-extender", "explain", "--kubeconfig", kubeconfig, "--pod", pod, "--nodes", nodes)
    assert "fits" in next(line for line in blind.splitlines() if line.startswith(roomy))
    assert "in flight: not known: ask the running extender (--extender URL)" in blind

    # 2. kubectl hugepages explain: the current context ($KUBECONFIG), the extender from the environment.
    env = {"KUBECONFIG": kubeconfig, "HUGEPAGE_EXTENDER_URL": tls_extender.url}
    plugin = run("kubectl-hugepages", "explain", pod, *tls_extender.extender_flags()[2:], env=env)
    print(plugin)
    assert "insufficient (in flight)" in next(line for line in plugin.splitlines() if line.startswith(roomy))
    assert "no node can hold the pod now: 1 would, but placements in flight" in plugin
    # Without --nodes, the nodes the pod's nodeSelector lets the scheduler consider (this test's two).
    assert "candidates: 2 nodes match the pod's nodeSelector" in plugin

    # kubectl hugepages nodes: per node pool, used, outside pods, in flight, free. The extender found
    # through a Service annotated as the chart annotates its own (hugepage-extender.io/url).
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "hugepage-extender", "annotations": {"hugepage-extender.io/url": tls_extender.url}},
        "spec": {"ports": [{"name": "https", "port": 8888}]},
    }
    plane.core.create_namespaced_service(cell.namespace, client.V1Service.model_validate(service))
    found = ["--extender-service", f"{cell.namespace}/hugepage-extender", *tls_extender.extender_flags()[2:]]
    listing = run("kubectl-hugepages", "nodes", "--output", "json", *found, env={"KUBECONFIG": kubeconfig})
    by_node = {r["node"]: r for r in json.loads(listing)["nodes"]}
    assert by_node[roomy]["in_flight_bytes"] == 768 * MI
    assert by_node[roomy]["in_flight_pods"] == 1
    assert by_node[roomy]["free_bytes"] == 256 * MI
    assert by_node[full]["outside_pods_bytes"] == 1024 * MI
    assert by_node[full]["free_bytes"] == 0
    print(run("kubectl-hugepages", "nodes", *tls_extender.extender_flags()[2:], env=env))


def test_the_state_endpoint_needs_the_verbs_client_certificate(cell: Cell, tls_extender: TLSExtender) -> None:
    port = int(tls_extender.url.rsplit(":", 1)[1])
    # No client certificate: the TLS handshake fails, nothing is answered.
    anonymous = ssl.create_default_context(cafile=str(tls_extender.ca))
    assert http_get(port, "/debug/state?namespace=x", context=anonymous) is None
    trusted = ssl.create_default_context(cafile=str(tls_extender.ca))
    trusted.load_cert_chain(*tls_extender.client)
    answer = wait_until(
        "the state answer", lambda: http_get(port, "/debug/state?namespace=x", context=trusted), timeout=180
    )
    assert answer[0] == 200
    # The plain probe port serves health and metrics only.
    probe = http_get(tls_extender.probe_port, "/debug/state")
    assert probe is not None
    assert probe[0] == 404
    # A CLI without the certificate says so in one line.
    done = subprocess.run(
        [
            str(BIN / "kubectl-hugepages"),
            "nodes",
            "--extender",
            tls_extender.url,
            "--extender-ca-file",
            str(tls_extender.ca),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(cell.plane.kubeconfig)},
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {tls_extender.url}:"), done.stderr
