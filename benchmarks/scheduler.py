"""Scheduler throughput: the real kube-scheduler with no extender, the null extender, and ours.

One control plane (etcd, kube-apiserver) on loopback, fake nodes as
scheduler_perf makes them (Node objects created with their status, no
kubelet; the apiserver runs without the admission plugins scheduler_perf
disables, so no not-ready taint lands on them), created concurrently. For
each size and variant, in one run on one machine:

1. create every pod up front (concurrently), before any scheduler runs, in
   the variant's own namespace;
2. start the variant's extender (if any) and wait until it is ready (ours:
   synced with the cluster, so it has listed those pods too);
3. watch the namespace (in a thread of its own), start a kube-scheduler with
   one profile, ``percentageOfNodesToScore: 100`` (the "adaptive" variants:
   the scheduler's default) and client QPS/burst 5000 (so the apiserver
   client limits no variant), and note when the watch shows each pod bound;
4. ``pods/s`` = (pods - 1) / (last bind - first bind): the scheduler working
   through a full queue. ``pods/s from start`` also counts the scheduler's
   start (informer sync, a few seconds) and matches "first pod created to
   last pod bound" had the pods been created as the scheduler started;
5. stop the scheduler and extender, delete the pods (so every variant starts
   from empty nodes).

Why not create the pods while the scheduler runs: on two cores the apiserver
takes pods at about 300/s while a scheduler runs, and the scheduler without
an extender at 1,000 nodes keeps up with that, so its rate would be the
creation rate and every ratio would shrink towards 1.

Each pod asks for 256Mi of ``hugepages-2Mi`` (so our extender decides rather
than passes it through), 100m CPU and 64Mi of memory.

The extender's round trip, two ways: ``ours`` is the chart's default path, plain
HTTP on 127.0.0.1 (the extender a sidecar of the scheduler, or on its node's host
network); ``ours-mtls`` is the previous default's, HTTPS with client certificates
(what the Service topology still uses), here on loopback too, so the difference
is TLS alone. What the Service adds on top (a hop to another node through
kube-proxy) is measured on kind: e2e/kind/test_topology.py prints it beside
loopback, from the same server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec

from benchmarks.http_decision import REPO_ROOT
from e2e.controlplane import (
    ControlPlane,
    ManagedProcess,
    Service,
    extender_scheduler_config,
    free_port,
    http_get,
    issue_client_certificate,
    node_manifest,
    pod_manifest,
)

T = TypeVar("T")
SCHEDULER_NAME = "bench-scheduler"
# What scheduler_perf's test apiserver disables: no not-ready taint on new nodes, no
# PriorityClass lookups, no ServiceAccount (no controller-manager makes the default one).
APISERVER_ARGS = ["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority"]
CLIENT_CONNECTION = {"qps": 5000, "burst": 5000}
CREATE_CONCURRENCY = 48
COLUMNS = [
    "nodes",
    "round",
    "variant",
    "pods",
    "bound",
    "first bind s",
    "last bind s",
    "pods/s",
    "x none",
    "pods/s from start",
    "x none from start",
]


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    extender: str | None = None  # "null", "ours"
    node_cache_capable: bool = True
    pods_share: float = 1.0  # full-Nodes variants are slow: fewer pods keep the run short
    config: dict[str, Any] | None = None  # ours: the extender's config file
    percentage_of_nodes_to_score: int | None = 100  # None: the scheduler's adaptive default
    mtls: bool = False  # ours: HTTPS with client certificates (the Service topology's default)


VARIANTS = [
    Variant("none", "no extender"),
    # What own-scheduler mode's percentageOfNodesToScore: 100 costs the cluster's scheduler
    # against its adaptive default (at 5,000 nodes it scores about 10% of them).
    Variant("none-adaptive", "no extender, adaptive percentageOfNodesToScore", percentage_of_nodes_to_score=None),
    Variant("null", "null extender, NodeNames", "null"),
    Variant("ours", "ours, NodeNames (K=3)", "ours", config={"defaults": {"mode": "enforce"}}),
    # The same with the scheduler's adaptive sample: what percentageOfNodesToScore 100 costs with
    # this extender (scheduler_window.py: what the adaptive sample costs a pod when few pools have room).
    Variant(
        "ours-adaptive",
        "ours, NodeNames (K=3), adaptive percentageOfNodesToScore",
        "ours",
        config={"defaults": {"mode": "enforce"}},
        percentage_of_nodes_to_score=None,
    ),
    Variant(
        "ours-mtls",
        "ours, NodeNames (K=3), HTTPS + client certs",
        "ours",
        config={"defaults": {"mode": "enforce"}},
        mtls=True,
    ),
    Variant("ours-k0", "ours, NodeNames, K=0", "ours", config={"defaults": {"mode": "enforce", "sampleSize": 0}}),
    Variant("null-full", "null extender, full Nodes", "null", node_cache_capable=False, pods_share=0.15),
    Variant("ours-full", "ours, full Nodes (K=3)", "ours", False, 0.15, {"defaults": {"mode": "enforce"}}),
    # The first variant again: how far the machine drifted while the others ran (ratios use the first).
    Variant("none-again", "no extender, again"),
]


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""  # the API's key


class _Spec(msgspec.Struct):
    nodeName: str | None = None


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


class _Event(msgspec.Struct):
    type: str
    object: _Pod


class _List(msgspec.Struct):
    metadata: _Meta
    items: list[_Pod] = []


_event = msgspec.json.Decoder(_Event)
_list = msgspec.json.Decoder(_List)


class Api:
    """The few apiserver calls the benchmark makes, over one keep-alive aiohttp session."""

    def __init__(self, base: str, context: ssl.SSLContext) -> None:
        self.base = base
        self.context = context

    async def __aenter__(self) -> Api:
        connector = aiohttp.TCPConnector(ssl=self.context, limit=CREATE_CONCURRENCY + 4)
        self.session = aiohttp.ClientSession(self.base, connector=connector, timeout=aiohttp.ClientTimeout(None))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> bytes:
        data = None if body is None else msgspec.json.encode(body)
        headers = {"Content-Type": "application/json"}
        async with self.session.request(method, path, data=data, headers=headers) as response:
            answer = await response.read()
            if response.status not in ok:
                raise RuntimeError(f"{method} {path}: {response.status} {answer[:300]!r}")
            return answer

    async def create_all(self, path: str, bodies: Sequence[dict[str, Any]]) -> None:
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(body: dict[str, Any]) -> None:
            async with gate:
                await self.request("POST", path, body)

        await asyncio.gather(*(create(b) for b in bodies))


@dataclass
class Outcome:
    pods: int
    bound: int
    create_seconds: float  # creating the pods, before the scheduler started
    first_bound_seconds: float  # scheduler started -> first pod bound
    total_seconds: float  # scheduler started -> last pod bound


async def _watch_binds(
    api: Api, namespace: str, bound: dict[str, float], want: int, *, opened: threading.Event, stop: threading.Event
) -> None:
    """Note when each pod is first seen bound: list, then watch from the list's resourceVersion.

    The apiserver closes a watch whose reader falls behind (``Forcing watcher close due to
    unresponsiveness``): then list again (pods bound meanwhile are stamped with the time of
    that list) and watch on.
    """
    pods = f"/api/v1/namespaces/{namespace}/pods"
    while len(bound) < want and not stop.is_set():
        listed = _list.decode(await api.request("GET", pods))
        now = time.perf_counter()
        for pod in listed.items:
            if pod.spec.nodeName:
                bound.setdefault(pod.metadata.name, now)
        if len(bound) >= want:
            return
        watch = f"{pods}?watch=1&resourceVersion={listed.metadata.resourceVersion}&timeoutSeconds=3600"
        async with api.session.get(watch) as response:
            response.raise_for_status()
            opened.set()
            async for line in response.content:
                event = _event.decode(line)
                if stop.is_set():
                    return
                if event.type == "ERROR":
                    break  # e.g. 410 Gone: list again
                pod = event.object
                if pod.spec.nodeName and pod.metadata.name not in bound:
                    bound[pod.metadata.name] = time.perf_counter()
                    if len(bound) >= want:
                        return


class BindWatch:
    """``_watch_binds`` on an event loop in a thread of its own, while the main thread starts processes."""

    def __init__(self, api: Api, namespace: str, want: int) -> None:
        self.bound: dict[str, float] = {}
        self._opened = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        own = Api(api.base, api.context)  # a session of its own, on the thread's own event loop
        self._thread = threading.Thread(target=self._run, args=(own, namespace, want), daemon=True)

    def _run(self, api: Api, namespace: str, want: int) -> None:
        try:
            asyncio.run(
                _in_session(
                    api, lambda a: _watch_binds(a, namespace, self.bound, want, opened=self._opened, stop=self._stop)
                )
            )
        except BaseException as error:  # handed to the main thread by wait()
            self._error = error
            self._opened.set()

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._opened.wait(timeout) or self._error is not None:
            raise RuntimeError(f"the watch did not open: {self._error}")

    def wait(self, timeout: float) -> dict[str, float]:
        """Bind times by pod; fewer than wanted when ``timeout`` ran out."""
        self._thread.join(timeout)
        self._stop.set()  # a watch still open ends at its next event (the pods' deletion)
        if self._error is not None:
            raise RuntimeError(f"the watch failed: {self._error}") from self._error
        return dict(self.bound)


async def _create_pods(api: Api, *, namespace: str, pods: int) -> float:
    await api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    bodies = [
        pod_manifest(f"p-{i:05d}", scheduler_name=SCHEDULER_NAME, hugepages_2mi="256Mi", cpu="100m", memory="64Mi")
        for i in range(pods)
    ]
    started = time.perf_counter()
    await api.create_all(f"/api/v1/namespaces/{namespace}/pods", bodies)
    return time.perf_counter() - started


def _config_for(variant: Variant, url: str | None, tls_config: dict[str, str] | None = None) -> dict[str, Any]:
    if url is None:
        profile: dict[str, Any] = {"schedulerName": SCHEDULER_NAME}
        if variant.percentage_of_nodes_to_score is not None:
            profile["percentageOfNodesToScore"] = variant.percentage_of_nodes_to_score
        document: dict[str, Any] = {"profiles": [profile]}
    else:
        document = extender_scheduler_config(
            url,
            scheduler_name=SCHEDULER_NAME,
            node_cache_capable=variant.node_cache_capable,
            percentage_of_nodes_to_score=variant.percentage_of_nodes_to_score,
            http_timeout="30s",
            extender={"tlsConfig": tls_config} if tls_config else None,
        )
    document["clientConnection"] = dict(CLIENT_CONNECTION)
    return document


def _start_extender(
    cp: ControlPlane, variant: Variant, tag: str, workdir: Path
) -> tuple[str | None, ManagedProcess | None, dict[str, str] | None]:
    if variant.extender is None:
        return None, None, None
    if variant.extender == "null":
        port = free_port()

        def ready() -> bool:
            answer = http_get(port, "/healthz")
            return answer is not None and answer[0] == 200

        argv = [sys.executable, "-m", "benchmarks.null_extender", "--port", str(port)]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # the control plane runs it in its workdir
        process = cp.start_process(f"null-extender-{tag}", argv, env=env, ready=ready)
        return f"http://127.0.0.1:{port}", process, None
    config = workdir / f"extender-{tag}.yaml"
    config.write_text(json.dumps(variant.config or {}))
    # K = 0 admits more nodes than a hold covers: serve refuses it without the bind verb
    # (over-commit in a burst). The benchmark measures the decision's cost, not placement.
    k0 = any(p.get("sampleSize") == 0 for p in [(variant.config or {}).get("defaults", {})])
    args = ["--kubeconfig", str(cp.kubeconfig), "--config", str(config), *(["--enable-bind"] if k0 else [])]
    env = {**os.environ, "LOG_LEVEL": "WARNING"}
    if variant.mtls:
        return _start_mtls_extender(cp, args, tag, env)
    service: Service = cp.start_extender(
        args, name=f"hugepage-extender-{tag}", ready_path="/readyz", env=env, timeout=120
    )
    return service.url, service.process, None


def _start_mtls_extender(
    cp: ControlPlane, args: list[str], tag: str, env: dict[str, str]
) -> tuple[str, ManagedProcess, dict[str, str]]:
    """Ours over HTTPS with client certificates: the control plane's CA signs both sides
    (its serving certificate names 127.0.0.1), as the chart's generated pair does."""
    certs = cp.certificates
    client_cert, client_key = issue_client_certificate(certs, "hugepage-scheduler")
    port, probe = free_port(), free_port()
    script = Path(sys.executable).parent / "hugepage-extender"
    executable = [str(script)] if script.exists() else [sys.executable, "-m", "extender"]
    argv = [
        *executable,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--probe-port",
        str(probe),
        "--tls-cert-file",
        str(certs.serving_cert),
        "--tls-key-file",
        str(certs.serving_key),
        "--client-ca-file",
        str(certs.ca_cert),
        *args,
    ]

    def ready() -> bool:
        answer = http_get(probe, "/readyz")
        return answer is not None and answer[0] == 200

    process = cp.start_process(f"hugepage-extender-{tag}", argv, env=env, ready=ready, timeout=120)
    tls_config = {"caFile": str(certs.ca_cert), "certFile": str(client_cert), "keyFile": str(client_key)}
    return f"https://127.0.0.1:{port}", process, tls_config


async def _create_nodes(api: Api, *, first: int, last: int) -> float:
    started = time.perf_counter()
    bodies = [
        node_manifest(f"node-{i:05d}", hugepages_2mi="64Gi", cpu="64", memory="256Gi", pods="110")
        for i in range(first, last)
    ]
    await api.create_all("/api/v1/nodes", bodies)
    return time.perf_counter() - started


async def _delete_pods(api: Api, *, namespace: str) -> None:
    await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")


def _row(size: int, variant: Variant, outcome: Outcome, baseline: dict[str, float] | None) -> dict[str, Any]:
    window = outcome.total_seconds - outcome.first_bound_seconds
    row: dict[str, Any] = {
        "nodes": size,
        "variant": variant.label,
        "pods": outcome.pods,
        "bound": outcome.bound,
        "create s": outcome.create_seconds,
        "first bind s": outcome.first_bound_seconds,
        "last bind s": outcome.total_seconds,
        "pods/s": (outcome.bound - 1) / window if window > 0 else float("nan"),
        "pods/s from start": outcome.bound / outcome.total_seconds,
    }
    if baseline is not None:
        row["x none"] = row["pods/s"] / baseline["pods/s"]
        row["x none from start"] = row["pods/s from start"] / baseline["pods/s from start"]
    return row


def run(
    plan: Sequence[tuple[int, int]],
    *,
    variants: Sequence[Variant] = VARIANTS,
    rounds: int = 1,
    timeout: float = 300.0,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """One row per (nodes, variant) for each (nodes, pods) of ``plan``; the nodes of each size
    are added to the same control plane, so sizes go up.

    ``workdir`` keeps the components' logs and configs (default: a temporary directory).
    """
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hugepage-bench-")))
        cp = ControlPlane(workdir / "cp", apiserver_args=APISERVER_ARGS, scheduler_verbosity=1)
        with cp:
            api = Api(cp.apiserver_url, cp.admin_ssl_context())
            made = 0
            for size, pods in sorted(plan):
                seconds = asyncio.run(_in_session(api, functools.partial(_create_nodes, first=made, last=size)))
                log(f"scheduler: {size - made} nodes created in {seconds:.1f} s")
                made = size
                for round_ in range(1, rounds + 1):
                    baseline: dict[str, float] | None = None
                    for variant in variants:
                        row = _one(
                            cp,
                            api,
                            workdir,
                            size=size,
                            pods=pods,
                            variant=variant,
                            round_=round_,
                            timeout=timeout,
                            baseline=baseline,
                        )
                        if variant.extender is None and baseline is None:
                            baseline = row
                        log(
                            f"scheduler: {size} nodes, {variant.label}: {row['bound']}/{row['pods']} bound, "
                            f"{row['pods/s']:.1f} pods/s"
                        )
                        rows.append(row)
    return rows


def _one(
    cp: ControlPlane,
    api: Api,
    workdir: Path,
    *,
    size: int,
    pods: int,
    variant: Variant,
    round_: int,
    timeout: float,
    baseline: dict[str, float] | None,
) -> dict[str, Any]:
    tag = f"{size}-{variant.key}-{round_}"
    namespace = f"bench-{tag}"
    count = max(50, round(pods * variant.pods_share))
    create_seconds = asyncio.run(_in_session(api, functools.partial(_create_pods, namespace=namespace, pods=count)))
    url, extender, tls_config = _start_extender(cp, variant, tag, workdir)
    try:
        watch = BindWatch(api, namespace, count)
        watch.start()
        started = time.perf_counter()
        scheduler = cp.start_scheduler(_config_for(variant, url, tls_config), name=f"kube-scheduler-{tag}")
        try:
            bound = watch.wait(timeout)
        finally:
            scheduler.stop()
    finally:
        if extender is not None:
            extender.stop()
    asyncio.run(_in_session(api, functools.partial(_delete_pods, namespace=namespace)))
    last = max(bound.values(), default=time.perf_counter())
    outcome = Outcome(
        pods=count,
        bound=len(bound),
        create_seconds=create_seconds,
        first_bound_seconds=min(bound.values(), default=last) - started,
        total_seconds=last - started,
    )
    return {"round": round_, **_row(size, variant, outcome, baseline)}


async def _in_session(api: Api, call: Callable[[Api], Awaitable[T]]) -> T:
    async with api as session:
        return await call(session)
