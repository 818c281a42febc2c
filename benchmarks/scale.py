"""Scale: the same figures at 5,000 nodes / 100,000 pods and 15,000 nodes / 300,000 pods, side by side.

- ``decision``: filter (enforce K = 3, enforce K = 0, shadow) and prioritize, NodeNames, every
  node a candidate, in process (``benchmarks.decision.Verbs``) and over HTTP against the null
  extender (``benchmarks.extender_server --pods``, one keep-alive client), per shape.
- ``memory``: ``benchmarks.memory`` (a fresh process loads the cache page by page) per shape, and
  the serving extender's resident set once loaded (from the HTTP part).
- ``watch``: what the extender does for one watch event at that scale, in a fresh process holding
  the synthetic cluster (frozen out of the collector's sight, as after a sync): the watch
  thread's part (``Reflector._apply``: decode the event, compact the object into a record) and
  the event loop's part (the informer's handler changing the cluster state, what delays
  decisions), for pod ADDED (pending), MODIFIED (bound), DELETED and node MODIFIED, p50/p99 in us.
- ``sync``: time to first sync. A real etcd + kube-apiserver (``e2e.controlplane``) is filled
  with nodes (status set) and pods created already bound (``spec.nodeName``, hugepage requests);
  then, per size, a fresh process runs the extender's ``ClusterInformer`` against it until ready,
  timing the time spent inside the API calls (the apiserver serving and sending each page) apart
  from the extender's own work (decoding each page and compacting it into records, then the
  relist handlers), and ``hugepage-extender serve`` is timed from launch to ``/readyz``. The same
  informer is also fed generated pages (as the apiserver sends them) with no apiserver at all:
  the extender's processing alone, at every shape, including shapes too large to create.

Run: ``python -m benchmarks scale`` (``--quick``: small shapes only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from kubernetes import client

from benchmarks import memory
from benchmarks.cluster import request_body, synthetic_cluster, synthetic_state
from benchmarks.decision import Verbs
from benchmarks.extender_server import CONFIG
from benchmarks.http_decision import FULL, QUICK, REPO_ROOT, Budget, measure, server_process
from benchmarks.null_extender import null_filter, null_prioritize
from benchmarks.scheduler import APISERVER_ARGS, Api
from benchmarks.stats import percentile, timed
from e2e.controlplane import ControlPlane, node_manifest
from extender.core.config import build_config
from extender.shell.kube.client import api_client
from extender.shell.kube.informer import ACTIVE_PODS, ClusterInformer, freeze_cache
from extender.shell.kube.reflector import PAGE_SIZE
from extender.state.cluster import ClusterState

SHAPES = [(5000, 100_000), (15000, 300_000)]
QUICK_SHAPES = [(1000, 20_000)]
QUICK_SYNC = [(200, 2_000)]
CREATE_CONCURRENCY = 48
ETCD_ARGS = ["--quota-backend-bytes=8589934592"]  # 300,000 pods are about 1 GB in etcd
LIST_PAGE_SIZES = (500, PAGE_SIZE)  # the reflector's page before and since the scale figures
MODES = {"enforce K=3": "bench", "enforce K=0": "bench-k0", "shadow": "bench-shadow"}

DECISION_COLUMNS = ["nodes", "pods", "path", "verb", "mode", "requests", "p50 ms", "p99 ms", "null p50 ms", "x null"]
MEMORY_COLUMNS = ["nodes", "pods", "rss_mib", "cache_mib", "baseline_mib", "serving rss MiB"]
WATCH_COLUMNS = ["nodes", "pods", "event", "events", "thread p50 us", "thread p99 us", "loop p50 us", "loop p99 us"]
SYNC_COLUMNS = [
    "nodes",
    "pods",
    "source",
    "created pods/s",
    "pod bytes",
    "ready s",
    "pods listed s",
    "in API calls s",
    "decode+compact s",
    "pods handler s",
    "nodes listed s",
    "rss MiB",
    "serve to /readyz s",
    "API list s, 500 a page",
    f"API list s, {PAGE_SIZE} a page",
]


# -- decision cost --------------------------------------------------------------------------


def decisions(
    shapes: Sequence[tuple[int, int]], *, quick: bool, serving: dict[tuple[int, int], float] | None = None
) -> list[dict[str, Any]]:
    """In-process and HTTP rows per shape; ``serving`` gets the serving extender's RSS once loaded."""
    repeat, budget = (30, QUICK["names"]) if quick else (200, FULL["names"])
    rows: list[dict[str, Any]] = []
    for nodes, pods in shapes:
        cluster = synthetic_cluster(nodes, pods, CONFIG)
        documents = cluster.node_documents
        bodies = {
            mode: request_body(documents, full_nodes=False, hugepages="1Gi", namespace=ns) for mode, ns in MODES.items()
        }
        scored = request_body(documents, full_nodes=False, hugepages="1Gi", pod_name="scored")
        verbs = Verbs(cluster)
        null_f = timed(functools.partial(null_filter, bodies["enforce K=3"]), repeat=repeat)
        null_p = timed(functools.partial(null_prioritize, scored), repeat=repeat)
        for mode, body in bodies.items():
            ours = timed(functools.partial(verbs.filter, body), repeat=repeat)
            rows.append(_decision_row(nodes, pods, "in process", "filter", mode, ours, null_f))
        ours = timed(functools.partial(verbs.prioritize, scored), repeat=repeat)
        rows.append(_decision_row(nodes, pods, "in process", "prioritize", "enforce", ours, null_p))
        rows.append(_decision_row(nodes, pods, "in process", "null filter", "-", null_f))
        rows.append(_decision_row(nodes, pods, "in process", "null prioritize", "-", null_p))
        del cluster, verbs
        with (
            server_process(
                "benchmarks.extender_server", "--nodes", str(nodes), "--pods", str(pods), timeout=300
            ) as ours_,
            server_process("benchmarks.null_extender") as null_,
        ):
            if serving is not None:
                serving[nodes, pods] = ours_.memory_mib()["rss_mib"]
            rows.extend(
                asyncio.run(
                    _http(
                        nodes=nodes,
                        pods=pods,
                        ours=ours_.url,
                        null=null_.url,
                        bodies=bodies,
                        scored=scored,
                        budget=budget,
                    )
                )
            )
    return rows


def memory_rows(
    shapes: Sequence[tuple[int, int]], *, serving: dict[tuple[int, int], float] | None = None
) -> list[dict[str, Any]]:
    """``benchmarks.memory`` per shape, with the serving extender's RSS when the decision part ran."""
    rows = memory.run(quick=False, shapes=shapes)
    for row in rows:
        row["serving rss MiB"] = (serving or {}).get((row["nodes"], row["pods"]))
    return rows


async def _http(
    *, nodes: int, pods: int, ours: str, null: str, bodies: dict[str, bytes], scored: bytes, budget: Budget
) -> list[dict[str, Any]]:
    rows = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        run = functools.partial(measure, session, clients=1, budget=budget)
        null_f = (await run(f"{null}/filter", bodies["enforce K=3"], expect_nodes=nodes)).latencies
        null_p = (await run(f"{null}/prioritize", scored, expect_nodes=nodes)).latencies
        for mode, body in bodies.items():
            expect = 3 if mode == "enforce K=3" else nodes
            load = await run(f"{ours}/filter", body, expect_nodes=expect)
            rows.append(_decision_row(nodes, pods, "HTTP", "filter", mode, load.latencies, null_f))
        load = await run(f"{ours}/prioritize", scored, expect_nodes=nodes)
        rows.append(_decision_row(nodes, pods, "HTTP", "prioritize", "enforce", load.latencies, null_p))
        rows.append(_decision_row(nodes, pods, "HTTP", "null filter", "-", null_f))
        rows.append(_decision_row(nodes, pods, "HTTP", "null prioritize", "-", null_p))
    return rows


def _decision_row(  # noqa: PLR0917 (a row's columns, in order)
    nodes: int, pods: int, path: str, verb: str, mode: str, samples: list[float], null: list[float] | None = None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "nodes": nodes,
        "pods": pods,
        "path": path,
        "verb": verb,
        "mode": mode,
        "requests": len(samples),
        "p50 ms": percentile(samples, 0.5) * 1e3,
        "p99 ms": percentile(samples, 0.99) * 1e3,
    }
    if null is not None:
        row["null p50 ms"] = percentile(null, 0.5) * 1e3
        row["x null"] = row["p50 ms"] / row["null p50 ms"]
    return row


# -- objects as the apiserver sends them --------------------------------------------------------


def served_pod(name: str, uid: str, version: int, node: str | None, namespace: str = "scale") -> dict[str, Any]:
    """A pod as kube-apiserver v1.37 sends it for the minimal bound pod ``sync`` creates (defaults,
    tolerations, managedFields): what a list page or a watch event carries, about 1.8 KB."""
    resources = {
        "limits": {"hugepages-2Mi": "512Mi", "memory": "64Mi"},
        "requests": {"cpu": "100m", "hugepages-2Mi": "512Mi", "memory": "64Mi"},
    }
    fields: dict[str, Any] = {"f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:terminationMessagePath": {}}
    fields["f:resources"] = {
        ".": {},
        "f:limits": {".": {}, "f:hugepages-2Mi": {}, "f:memory": {}},
        "f:requests": {".": {}, "f:cpu": {}, "f:hugepages-2Mi": {}, "f:memory": {}},
    }
    spec_fields = {"f:containers": {'k:{"name":"app"}': {".": {}, **fields}}, "f:dnsPolicy": {}, "f:nodeName": {}}
    spec_fields |= {"f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": resources,
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for k in ("not-ready", "unreachable")
        ],
        "enableServiceLinks": True,
    }
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": str(version),
            "generation": 1,
            "creationTimestamp": "2026-11-30T18:24:32Z",
            "managedFields": [
                {
                    "manager": "Python",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-30T18:24:32Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": spec_fields},
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def served_node(i: int, version: int) -> dict[str, Any]:
    """A fake node as the apiserver sends it (``e2e.controlplane.node_manifest``, with metadata)."""
    node = node_manifest(_node_name(i), hugepages_2mi="64Gi", cpu="64", memory="256Gi", pods="110")
    node["metadata"] |= {
        "uid": f"{i:08x}-0000-4000-8000-000000000000",
        "resourceVersion": str(version),
        "creationTimestamp": "2026-11-30T18:24:32Z",
    }
    return node


def _node_name(i: int) -> str:
    return f"node-{i:05d}"


def _pod_manifest(i: int, nodes: int) -> dict[str, Any]:
    """The minimal bound pod created in the apiserver (hugepages and memory: limits = requests)."""
    requests = {"cpu": "100m", "memory": "64Mi", "hugepages-2Mi": "512Mi"}
    limits = {"memory": "64Mi", "hugepages-2Mi": "512Mi"}
    return {
        "metadata": {"name": f"p-{i:06d}"},
        "spec": {
            "nodeName": _node_name(i % nodes),
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


# -- watch event cost (a child process) --------------------------------------------------------


class _Loop:
    """Stands in for the event loop: keeps what the watch thread posts, to run it when timed."""

    def __init__(self) -> None:
        self.posted: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def call_soon_threadsafe(self, callback: Callable[..., None], *args: Any) -> None:
        self.posted.append((callback, args))


def _parked_informer(state: Any, loop: Any) -> Any:
    """The extender's ClusterInformer, started on ``loop`` with its list calls parked for good (so its
    threads never list nor watch): its reflectors and handlers are wired exactly as in ``serve``."""
    informer = ClusterInformer(client.ApiClient(), state, node_reports=False)
    parked = threading.Event()

    def park(*args: Any, **kwargs: Any) -> None:
        parked.wait()

    for call_name, _ in _LISTS.values():
        setattr(informer._core, call_name, park)
    informer.start(loop)
    return informer


def _watch_child(nodes: int, pods: int, events: int) -> list[dict[str, Any]]:
    logging.disable(logging.WARNING)
    _, state = synthetic_state(nodes, pods, CONFIG)
    freeze_cache()  # as the informer does once synced
    loop = _Loop()
    informer = _parked_informer(state, loop)
    reflectors = informer.reflectors
    before = (state.node_count, state.pod_count)
    stride = 7919  # a prime: consecutive events land on nodes far apart, as in a cluster
    lines: dict[str, list[bytes]] = {"pod ADDED (pending)": [], "pod MODIFIED (bound)": [], "pod DELETED": []}
    node_lines: list[bytes] = []
    version = 10**7
    for i in range(events):
        node = _node_name(i * stride % nodes)
        uid = f"watch-{i:08d}"
        for kind, (event, bound) in zip(lines, (("ADDED", None), ("MODIFIED", node), ("DELETED", node)), strict=True):
            version += 1
            pod = served_pod(f"w-{i:06d}", uid, version, bound)
            lines[kind].append(msgspec.json.encode({"type": event, "object": pod}))
        version += 1
        node_lines.append(msgspec.json.encode({"type": "MODIFIED", "object": served_node(i * stride % nodes, version)}))
    samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in [*lines, "node MODIFIED"]}

    def apply(kind: str, resource: str, line: bytes, keep: bool) -> None:
        reflector = reflectors[resource]
        started = time.perf_counter()
        reflector._apply(line, "1")
        posted = time.perf_counter()
        callback, args = loop.posted.pop()
        callback(*args)
        done = time.perf_counter()
        if keep:
            samples[kind][0].append(posted - started)
            samples[kind][1].append(done - posted)

    warmup = min(200, events // 5)
    for i in range(events):
        for kind, kind_lines in lines.items():
            apply(kind, "pods", kind_lines[i], i >= warmup)
        apply("node MODIFIED", "nodes", node_lines[i], i >= warmup)
    informer.stop()
    if (state.node_count, state.pod_count) != before or state.unready_reason() is not None:
        raise RuntimeError(f"the events changed the cluster: {before} -> {(state.node_count, state.pod_count)}")
    return [
        {
            "nodes": nodes,
            "pods": pods,
            "event": kind,
            "events": len(thread),
            "thread p50 us": percentile(thread, 0.5) * 1e6,
            "thread p99 us": percentile(thread, 0.99) * 1e6,
            "loop p50 us": percentile(loop_, 0.5) * 1e6,
            "loop p99 us": percentile(loop_, 0.99) * 1e6,
        }
        for kind, (thread, loop_) in samples.items()
    ]


# -- time to first sync (a child process) --------------------------------------------------------


@dataclass
class _SyncClock:
    inside: dict[str, float] = field(default_factory=lambda: {"nodes": 0.0, "pods": 0.0})
    bytes: dict[str, int] = field(default_factory=lambda: {"nodes": 0, "pods": 0})
    listed_at: dict[str, float] = field(default_factory=dict)
    handler: dict[str, float] = field(default_factory=dict)


_LISTS = {"nodes": ("list_node", "_nodes_listed"), "pods": ("list_pod_for_all_namespaces", "_pods_listed")}


def _first_sync(api: Any, calls: dict[str, Callable[..., Any]] | None) -> dict[str, Any]:
    """Start the extender's informer (``calls``: list calls standing in for the apiserver's) and time
    it until ready: seconds inside the list calls, until each list is handed over, in its handler."""
    logging.disable(logging.WARNING)
    state = ClusterState(build_config({"defaults": {"mode": "enforce"}}, {}))
    informer = ClusterInformer(api, state, node_reports=False)
    clock = _SyncClock()
    parked = threading.Event()
    for resource, (call_name, handler_name) in _LISTS.items():
        call = (calls or {}).get(resource) or getattr(informer._core, call_name)

        def list_call(*args: Any, _call: Any = call, _resource: str = resource, **kwargs: Any) -> Any:
            if kwargs.get("watch"):
                if calls is not None:
                    parked.wait()  # no apiserver: no watch
                return _call(*args, **kwargs)
            started = time.perf_counter()
            response = _call(*args, **kwargs)
            data = response.data  # read here: the transfer is the apiserver's part
            clock.inside[_resource] += time.perf_counter() - started
            clock.bytes[_resource] += len(data)
            return response

        handler = getattr(informer, handler_name)

        def listed(records: list[Any], _handler: Any = handler, _resource: str = resource) -> None:
            clock.listed_at[_resource] = time.perf_counter()
            _handler(records)
            clock.handler[_resource] = time.perf_counter() - clock.listed_at[_resource]

        setattr(informer._core, call_name, list_call)
        setattr(informer, handler_name, listed)

    async def until_ready() -> float:
        started = time.perf_counter()
        informer.start(asyncio.get_running_loop())
        while not state.ready:
            await asyncio.sleep(0.005)
        ready = time.perf_counter() - started
        informer.stop()
        clock.listed_at = {k: v - started for k, v in clock.listed_at.items()}
        return ready

    ready = asyncio.run(until_ready())
    return {
        "ready s": ready,
        "pods listed s": clock.listed_at["pods"],
        "in API calls s": clock.inside["pods"],
        "decode+compact s": clock.listed_at["pods"] - clock.inside["pods"],
        "pods handler s": clock.handler["pods"],
        "nodes listed s": clock.listed_at["nodes"],
        "node list in API calls s": clock.inside["nodes"],
        "nodes handler s": clock.handler["nodes"],
        "pod bytes": clock.bytes["pods"] / max(1, state.pod_count),
        "listed pods": state.pod_count,
        "listed nodes": state.node_count,
        "rss MiB": _rss_mib(),
    }


@dataclass
class _Page:
    data: bytes


def _fed_calls(nodes: int, pods: int) -> dict[str, Callable[..., Any]]:
    """List calls answering pages as the apiserver sends them (``served_pod``, ``served_node``),
    made when asked for (their making is counted as the apiserver's part, as its serving is)."""

    def pages(total: int, kind: str, item: Callable[[int], bytes]) -> Callable[..., _Page]:
        def list_call(*, limit: int, _continue: str | None = None, **kwargs: Any) -> _Page:
            first = int(_continue or 0)
            last = min(total, first + limit)
            more = f',"continue":"{last}"' if last < total else ""
            head = f'{{"kind":"{kind}","apiVersion":"v1","metadata":{{"resourceVersion":"{10**7}"{more}}},"items":['
            return _Page(head.encode() + b",".join(item(i) for i in range(first, last)) + b"]}")

        return list_call

    marker = "NODE-MARKER"
    template = msgspec.json.encode(served_pod("p-MARKER", "uid-MARKER", 1, marker)).replace(b"%", b"%%")
    template = (
        template.replace(b"p-MARKER", b"p-%06d").replace(b"uid-MARKER", b"uid-%08d").replace(marker.encode(), b"%s")
    )
    encode = msgspec.json.encode
    return {
        "nodes": pages(nodes, "NodeList", lambda i: encode(served_node(i, 1000 + i))),
        "pods": pages(pods, "PodList", lambda i: template % (i, i, _node_name(i % nodes).encode())),
    }


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _child(*args: str, timeout: float = 1800) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"benchmarks.scale {' '.join(args)} exited with {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def watch_events(shapes: Sequence[tuple[int, int]], *, events: int) -> list[dict[str, Any]]:
    return [row for nodes, pods in shapes for row in _child("watch", str(nodes), str(pods), str(events))]


def first_sync(
    real: Sequence[tuple[int, int]],
    fed: Sequence[tuple[int, int]],
    *,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Rows for each (nodes, pods) of ``real`` (created in one apiserver, sizes going up) and of ``fed``."""
    rows: list[dict[str, Any]] = []
    if real:
        with contextlib.ExitStack() as stack:
            if workdir is None:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hugepage-scale-")))
            rows.extend(_real_sync(real, workdir, log))
    for nodes, pods in fed:
        row = {"nodes": nodes, "pods": pods, "source": "pages fed in process"}
        rows.append(row | _child("feed", str(nodes), str(pods)))
        log(f"scale: {nodes} nodes / {pods} pods fed in process, ready in {rows[-1]['ready s']:.1f} s")
    return rows


def _real_sync(plan: Sequence[tuple[int, int]], workdir: Path, log: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    cp = ControlPlane(workdir / "cp", apiserver_args=APISERVER_ARGS, etcd_args=ETCD_ARGS)
    with cp:
        api = Api(cp.apiserver_url, cp.admin_ssl_context())
        made_nodes = made_pods = 0
        config = workdir / "extender.yaml"
        config.write_text(json.dumps({"defaults": {"mode": "enforce"}}))
        for nodes, pods in sorted(plan):
            bodies: Iterator[dict[str, Any]] = (
                node_manifest(_node_name(i), hugepages_2mi="64Gi", cpu="64", memory="256Gi", pods="110")
                for i in range(made_nodes, nodes)
            )
            seconds = asyncio.run(_create(api, "/api/v1/nodes", bodies, first=not made_nodes))
            log(f"scale: {nodes - made_nodes} nodes created in {seconds:.1f} s")
            bodies = (_pod_manifest(i, nodes) for i in range(made_pods, pods))
            seconds = asyncio.run(_create(api, "/api/v1/namespaces/scale/pods", bodies, first=not made_pods))
            created = (pods - made_pods) / seconds
            log(f"scale: {pods - made_pods} pods created in {seconds:.1f} s ({created:.0f}/s)")
            made_nodes, made_pods = nodes, pods
            row: dict[str, Any] = {"nodes": nodes, "pods": pods, "source": "kube-apiserver", "created pods/s": created}
            row |= _child("sync", str(cp.kubeconfig))
            for limit in LIST_PAGE_SIZES:  # the apiserver alone: every pod, page by page, nothing decoded
                row[f"API list s, {limit} a page"] = asyncio.run(_list_seconds(api, limit))
            if (row["listed nodes"], row["listed pods"]) != (nodes, pods):
                raise RuntimeError(f"listed {row['listed nodes']} nodes, {row['listed pods']} pods: {nodes}, {pods}")
            started = time.perf_counter()
            service = cp.start_extender(
                ["--kubeconfig", str(cp.kubeconfig), "--config", str(config), "--no-node-reports", "--no-events"],
                name=f"hugepage-extender-{nodes}",
                ready_path="/readyz",
                env={**os.environ, "LOG_LEVEL": "WARNING", "PYTHONPATH": str(REPO_ROOT)},
                timeout=1200,
            )
            row["serve to /readyz s"] = time.perf_counter() - started
            service.process.stop()
            rows.append(row)
            log(f"scale: {nodes} nodes / {pods} pods: informer ready in {row['ready s']:.1f} s")
    return rows


class _ListMeta(msgspec.Struct):
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Continue(msgspec.Struct):
    metadata: _ListMeta


async def _list_seconds(api: Api, limit: int) -> float:
    """Seconds to list every active pod (the informer's selector), ``limit`` a page."""
    selector = ACTIVE_PODS.replace("!", "%21").replace("=", "%3D").replace(",", "%2C")
    async with api as session:
        token: str | None = None
        started = time.perf_counter()
        while True:
            more = f"&continue={token}" if token else ""
            page = await session.request("GET", f"/api/v1/pods?limit={limit}&fieldSelector={selector}{more}")
            token = msgspec.json.decode(page, type=_Continue).metadata.continue_
            if not token:
                return time.perf_counter() - started


async def _create(api: Api, path: str, bodies: Iterator[dict[str, Any]], *, first: bool) -> float:
    """POST every body, ``CREATE_CONCURRENCY`` at a time; the seconds it took."""
    async with api as session:
        if first and "/namespaces/" in path:
            namespace = path.split("/")[4]
            await session.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        started = time.perf_counter()

        async def worker() -> None:
            for body in bodies:  # one shared iterator: each body is taken once
                await session.request("POST", path, body)

        await asyncio.gather(*(worker() for _ in range(CREATE_CONCURRENCY)))
        return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    """The child processes: ``watch NODES PODS EVENTS``, ``sync KUBECONFIG``, ``feed NODES PODS``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    parser.add_argument("what", choices=("watch", "sync", "feed"))
    parser.add_argument("args", nargs="*")
    args = parser.parse_args(argv)
    if args.what == "watch":
        nodes, pods, events = (int(a) for a in args.args)
        result: Any = _watch_child(nodes, pods, events)
    elif args.what == "sync":
        result = _first_sync(api_client(Path(args.args[0]), in_cluster=False), None)
    else:
        nodes, pods = (int(a) for a in args.args)
        result = _first_sync(None, _fed_calls(nodes, pods))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    # Without the cleanup of interpreter exit: the informer's daemon threads may sit in the
    # client's sockets, and tearing those down under them aborts the process after the figures.
    os._exit(main())
