""" "Why is my pod Pending?" answered against the real control plane.

A real kube-scheduler calls the extender over mutual TLS; another scheduler's placement
is in flight on the one node that would otherwise fit; the pod waits. Then the commands an
operator runs: ``hugepage-extender explain --kubeconfig`` and ``kubectl-hugepages explain``
(the executable ``kubectl hugepages`` runs), as subprocesses, print why, including the hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes import client

from e2e.cluster.placement_support import (
    BIN,
    EXTENDER_REASON_INSUFFICIENT,
    RESOURCE,
    Cell,
    bound_active_pods,
    bound_pod,
    placement_scheduler_config,
    run,
    wait_for_event,
    write_extender_config,
)
from e2e.controlplane import (
    ManagedProcess,
    free_port,
    http_get,
    issue_client_certificate,
    pod_manifest,
    wait_until,
)
from extender.core.nodereport import GROUP, PLURAL, VERSION
from extender.shell.remote import RemoteExtender
from tests.verdicts import of_explanation, of_filter_answer

pytestmark = pytest.mark.cluster
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
    # Holds last long enough for the test to look at them.
    with started_tls_extender(
        cell, {"namespaces": {cell.namespace: {"mode": "enforce", "holdTimeoutSeconds": 300}}}
    ) as (extender):
        yield extender


@contextlib.contextmanager
def started_tls_extender(cell: Cell, document: Mapping[str, Any]) -> Iterator[TLSExtender]:
    plane = cell.plane
    certs = plane.certificates
    config = write_extender_config(cell.tmp_path, document)
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


# --------------------------------------------------------------------------- explain says what the filter does


def report(node: str, *, age: float, outside: int, numa_free: tuple[int, ...] = ()) -> dict[str, Any]:
    """A HugepageNodeReport as a node agent writes it, for a 1Gi pool (512 pages)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age))
    numa = {
        str(n): {"totalPages": 256, "freePages": free, "reservedPages": None, "surplusPages": 0,
                 "podPages": None, "outsidePages": None}
        for n, free in enumerate(numa_free)
    }  # fmt: skip
    size = {"totalPages": 512, "freePages": 512 - outside, "reservedPages": 0, "surplusPages": 0,
            "podPages": 0, "outsidePages": outside, "numa": numa}  # fmt: skip
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HugepageNodeReport",
        "metadata": {"name": node},
        "report": {"observedAt": at, "source": "cgroup-v2", "pageSizes": {RESOURCE: size}},
    }


def guaranteed_pod(cell: Cell, namespace: str, name: str, hugepages: str) -> None:
    """A Guaranteed pod (cpu and memory limits equal to requests) no scheduler takes."""
    manifest = pod_manifest(name, scheduler_name="nobody", hugepages_2mi=hugepages, cpu="1", memory="1Gi")
    manifest["spec"]["nodeSelector"] = cell.selector
    resources = manifest["spec"]["containers"][0]["resources"]
    resources["limits"] = dict(resources["requests"])
    cell.core.create_namespaced_pod(namespace, client.V1Pod.model_validate(manifest))


def filter_one_node(extender: TLSExtender, pod: Mapping[str, Any], node: str) -> Any:
    """The filter's answer for ``pod`` on ``node`` alone, as kube-scheduler asks it (mutual TLS)."""
    context = ssl.create_default_context(cafile=str(extender.ca))
    context.load_cert_chain(*extender.client)
    request = urllib.request.Request(
        f"{extender.url}/filter",
        data=msgspec.json.encode({"Pod": pod, "NodeNames": [node]}),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        return msgspec.json.decode(answer.read())


def test_kubectl_explain_gives_the_filters_verdict_on_every_node(cell: Cell, report_crd: None) -> None:
    """For every pod and node: ``kubectl hugepages explain`` (the API read by the plugin, the node
    agents' records, the extender's holds and policy) says what the extender's filter answers.
    The cases the live path used to miss: the NUMA rule for Guaranteed pods in a ``numaAligned``
    namespace, the agents' records, a namespace's own ``nodeReportMaxAgeSeconds``."""
    plane = cell.plane
    strict = cell.new_namespace("strict")
    document = {
        "namespaces": {
            cell.namespace: {"mode": "enforce", "holdTimeoutSeconds": 300, "numaAligned": True},
            strict: {"mode": "enforce", "holdTimeoutSeconds": 300, "nodeReportMaxAgeSeconds": 60},
        }
    }
    nodes = [
        cell.node("roomy"),
        cell.node("no-pool", hugepages="0"),
        cell.node("by-hand", reserved="900Mi"),
        cell.node("numa"),  # its record: NUMA nodes with 100 and 200 pages free
        cell.node("reported"),  # its record: 400 pages held outside pods, 120 s old
        cell.node("busy"),
    ]
    custom = client.CustomObjectsApi(plane.api_client)
    for body in (report(nodes[3], age=10, outside=0, numa_free=(100, 200)), report(nodes[4], age=120, outside=400)):
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    pods = {
        "pinned": (cell.namespace, "500Mi", True),  # 250 pages: no NUMA node of "numa" has them
        "small-pinned": (cell.namespace, "300Mi", True),  # 150 pages: NUMA node 1 has them
        "loose": (cell.namespace, "500Mi", False),  # not Guaranteed: no NUMA rule
        "web": (cell.namespace, "512Mi", False),  # the record counts: held outside pods on "reported"
        "strict": (strict, "512Mi", False),  # older than this namespace's 60 s: requests only
        "huge": (strict, "3Gi", False),
    }
    for name, (namespace, hugepages, pinned) in pods.items():
        if pinned:
            guaranteed_pod(cell, namespace, name, hugepages)
        else:
            plane.create_pod(
                namespace, name, scheduler_name="nobody", hugepages_2mi=hugepages, node_selector=cell.selector
            )
    with started_tls_extender(cell, document) as extender:
        # Bound last: once the extender's cache holds it, its watch has shown the pods above.
        bound_pod(plane, strict, "tenant", nodes[5], hugepages_2mi="900Mi")
        remote = RemoteExtender(extender.url, extender.ca, *extender.client)

        def in_step() -> bool:
            answer = http_get(extender.probe_port, "/metrics")
            cached = [
                line for line in (answer[1].decode() if answer else "").splitlines()
                if line.startswith("hugepage_extender_cached_pods ")
            ]  # fmt: skip
            reports = remote.state(cell.namespace).node_reports or {}
            expected = bound_active_pods(plane)
            return bool(cached) and float(cached[0].split()[1]) == expected and {nodes[3], nodes[4]} <= set(reports)

        wait_until("the extender's watch to show the pods and the records", in_step, timeout=60)
        env = {"KUBECONFIG": str(plane.kubeconfig)}
        compared: set[str] = set()
        for name, (namespace, _, _) in pods.items():
            # The plugin first: a filter call holds the pod's need, and the pod's own hold is left out.
            out = run(
                "kubectl-hugepages",
                "explain",
                f"{namespace}/{name}",
                "--output",
                "json",
                *extender.extender_flags(),
                env=env,
            )
            rows = {row["node"]: row for row in json.loads(out)["nodes"]}
            assert set(rows) == set(nodes), out
            pod = msgspec.json.decode(
                plane.core.read_namespaced_pod(name, namespace, _preload_content=False).data  # type: ignore[attr-defined]
            )
            for node, row in rows.items():
                said = of_filter_answer(filter_one_node(extender, pod, node), node)
                assert of_explanation(row, RESOURCE) == said, (name, node, row)
                compared.add(row["verdict"])
    assert {"fits", "insufficient", "no NUMA node fits", "no pool", "exceeds pool", "held outside pods"} <= compared
