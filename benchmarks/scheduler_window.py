"""Time to bind on the real kube-scheduler when few pools have room: percentageOfNodesToScore 100
against the adaptive default, with this extender's window retries (extender/core/window.py).

One control plane on loopback, fake nodes as ``benchmarks.scheduler`` makes them (64 GiB pools),
every pool held outside pods (the extender's ``reserved`` annotation, which the scheduler's
in-tree filters do not see: the blind spot the window retries cover) but a share of them, chosen
at random (seeded) and growing: 0.1%, then 1%, then 10% of the pools have room. For each share
and each ``percentageOfNodesToScore``, a kube-scheduler with the chart's enforce entry (not
ignorable, selected by the marker, the scheduler's default backoff of 1 s doubling to 10 s) places
pods one at a time: a hugepage pod (1 GiB of ``hugepages-2Mi``) and a VM pod sized by memory
(2 GiB of memory, ``needFromMemory``). **bind s** is pod created -> the watch of the pod shows it
bound; **retries** the extender's window retries (Errors answered) during those pods.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.scheduler import APISERVER_ARGS, CLIENT_CONNECTION, SCHEDULER_NAME, Api, _in_session
from e2e.controlplane import ControlPlane, Service, extender_scheduler_config, node_manifest, pod_manifest
from extender.core.window import ENFORCE_MARKER

COLUMNS = [
    "nodes",
    "room %",
    "pools with room",
    "scheduler",
    "pod",
    "pods",
    "bound",
    "bind s p50",
    "bind s max",
    "retries",
]
RESERVED = "hugepage-extender.io/reserved-hugepages-2Mi"
POOL = "64Gi"
HUGEPAGE_NAMESPACE = "window-hugepages"
VM_NAMESPACE = "window-vm"
# Whole percentages of the nodes, scheduler-side: None is kube-scheduler's adaptive default.
PERCENTAGES: tuple[int | None, ...] = (100, None)


def _label(percentage: int | None) -> str:
    return "adaptive" if percentage is None else f"{percentage}%"


def _scheduler_config(url: str, percentage: int | None) -> dict[str, Any]:
    """The chart's enforce entry: not ignorable, only pods with the marker; default backoff."""
    document = extender_scheduler_config(
        url,
        scheduler_name=SCHEDULER_NAME,
        percentage_of_nodes_to_score=percentage,
        http_timeout="30s",
        extender={"managedResources": [{"name": ENFORCE_MARKER, "ignoredByScheduler": True}]},
    )
    document["clientConnection"] = dict(CLIENT_CONNECTION)
    return document


async def _create_nodes(api: Api, *, count: int) -> None:
    bodies = []
    for i in range(count):
        body = node_manifest(f"node-{i:05d}", hugepages_2mi=POOL, cpu="64", memory="256Gi", pods="110")
        body["metadata"]["annotations"] = {RESERVED: POOL}
        bodies.append(body)
    await api.create_all("/api/v1/nodes", bodies)


async def _create_namespaces(api: Api) -> None:
    for namespace in (HUGEPAGE_NAMESPACE, VM_NAMESPACE):
        await api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})


async def _delete_pods(api: Api, *, namespace: str) -> None:
    await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")


async def _give_room(api: Api, *, names: Sequence[str]) -> None:
    """Drop the reservation of these nodes (a merge patch each, a few at once)."""
    gate = asyncio.Semaphore(32)
    patch = msgspec.json.encode({"metadata": {"annotations": {RESERVED: None}}})

    async def one(name: str) -> None:
        async with gate:
            headers = {"Content-Type": "application/merge-patch+json"}
            async with api.session.patch(f"/api/v1/nodes/{name}", data=patch, headers=headers) as response:
                response.raise_for_status()

    await asyncio.gather(*(one(name) for name in names))


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None


class _Pod(msgspec.Struct):
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)


_pod = msgspec.json.Decoder(_Pod)


async def _place(api: Api, *, namespace: str, name: str, body: dict[str, Any], timeout: float) -> float | None:
    """Create the pod, poll until it is bound (every 20 ms); seconds, None when not within ``timeout``."""
    started = time.perf_counter()
    await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    while time.perf_counter() - started < timeout:
        if _pod.decode(await api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")).spec.nodeName:
            return time.perf_counter() - started
        await asyncio.sleep(0.02)
    return None


def _pod_body(kind: str, name: str) -> dict[str, Any]:
    marker = {ENFORCE_MARKER: "1"}  # what the chart's admission policy adds in an enforcing namespace
    if kind == "hugepages":
        return pod_manifest(name, scheduler_name=SCHEDULER_NAME, hugepages_2mi="1Gi", extended=marker)
    return pod_manifest(name, scheduler_name=SCHEDULER_NAME, memory="2Gi", extended=marker)


def _retries(extender: Service) -> float:
    answer = extender.get("/metrics")
    assert answer is not None
    assert answer[0] == 200
    for line in answer[1].decode().splitlines():
        if line.startswith("hugepage_extender_window_retries_total "):
            return float(line.split()[1])
    return 0.0


def run(
    *,
    nodes: int = 5000,
    shares: Sequence[float] = (0.1, 1.0, 10.0),
    pods: int = 10,
    timeout: float = 90.0,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hugepage-window-") as scratch:
        root = workdir or Path(scratch)
        cp = ControlPlane(root / "cp", apiserver_args=APISERVER_ARGS, scheduler_verbosity=1)
        with cp:
            api = Api(cp.apiserver_url, cp.admin_ssl_context())
            asyncio.run(_in_session(api, functools.partial(_create_nodes, count=nodes)))
            asyncio.run(_in_session(api, _create_namespaces))
            config = root / "extender-window.yaml"
            config.write_text(
                json.dumps(
                    {
                        "defaults": {"mode": "enforce"},
                        "namespaces": {VM_NAMESPACE: {"mode": "enforce", "needFromMemory": True}},
                    }
                )
            )
            extender = cp.start_extender(
                ["--kubeconfig", str(cp.kubeconfig), "--config", str(config)],
                name="hugepage-extender-window",
                ready_path="/readyz",
                env={**os.environ, "LOG_LEVEL": "WARNING"},
                timeout=180,
            )
            order = [f"node-{i:05d}" for i in random.Random(24).sample(range(nodes), nodes)]
            with_room = 0
            for share in sorted(shares):
                want = max(1, round(nodes * share / 100))
                asyncio.run(_in_session(api, functools.partial(_give_room, names=order[with_room:want])))
                with_room = want
                time.sleep(2)  # the extender's watch has the annotations gone
                for percentage in PERCENTAGES:
                    rows.extend(_cell(cp, api, extender, nodes, share, with_room, percentage, pods, timeout, log))
            extender.stop()
    return rows


def _cell(  # noqa: PLR0917 (one cell of the table and what it runs on)
    cp: ControlPlane,
    api: Api,
    extender: Service,
    nodes: int,
    share: float,
    with_room: int,
    percentage: int | None,
    pods: int,
    timeout: float,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    tag = f"{share:g}-{_label(percentage)}".replace(".", "p").replace("%", "")
    scheduler = cp.start_scheduler(_scheduler_config(extender.url, percentage), name=f"kube-scheduler-window-{tag}")
    rows = []
    try:
        for kind, namespace in (("hugepages", HUGEPAGE_NAMESPACE), ("memory", VM_NAMESPACE)):
            before = _retries(extender)
            took: list[float] = []
            for i in range(pods):
                name = f"{kind}-{tag}-{i}"
                place = functools.partial(
                    _place, namespace=namespace, name=name, body=_pod_body(kind, name), timeout=timeout
                )
                seconds = asyncio.run(_in_session(api, place))
                if seconds is not None:
                    took.append(seconds)
            row = {
                "nodes": nodes,
                "room %": share,
                "pools with room": with_room,
                "scheduler": _label(percentage),
                "pod": "hugepages 1Gi" if kind == "hugepages" else "VM, memory 2Gi",
                "pods": pods,
                "bound": len(took),
                "bind s p50": statistics.median(took) if took else float("nan"),
                "bind s max": max(took, default=float("nan")),
                "retries": _retries(extender) - before,
            }
            log(f"scheduler window: {row}")
            rows.append(row)
            asyncio.run(_in_session(api, functools.partial(_delete_pods, namespace=namespace)))
    finally:
        scheduler.stop()
    return rows
