"""A backlog of waiting pods on the real kube-scheduler: how fast the pods that fit are placed.

One control plane on loopback, fake nodes as ``benchmarks.scheduler`` makes them (64 GiB pools),
half of them **blocked** (label ``backlog=blocked``: every pool held outside pods, the extender's
``reserved`` annotation, which the scheduler's in-tree filters do not see) and half **open**
(``backlog=open``, free). First ``waiting`` pods that select the blocked half are created and left to
be turned away; then ``fitting`` pods that select the open half are created at once, and the time from
the first creation to the last bind gives the rate at which they are placed. Three variants, in one
run on the same nodes, each with a kube-scheduler of its own (the chart's profile: adaptive
``percentageOfNodesToScore``; the chart's enforce entry, not ignorable, selected by the marker):

- **kube-scheduler alone**: no extender; the waiting pods ask 128 GiB of ``hugepages-2Mi`` (more than
  any pool), so the scheduler's own resource filter turns them away, with its queueing hints;
- **extender turns the backlog away**: the waiting pods ask 512 MiB (only the extender sees that no
  blocked pool has room) and the fitting pods 512 MiB, both through the enforce entry;
- **backlog in-tree, fitting via extender**: the waiting pods as in the first, the fitting ones as in
  the second;
- **gates**: as the second, every pod created behind the extender's scheduling gate (what the chart's
  marker policy does with ``gates.enabled``): the extender lifts the gate of a pod once a node it may use
  has room, so the waiting pods never enter the scheduler's queue.

**placed/s** is fitting pods over first creation to last bind; **x alone** that over the first
variant's; **filters/fitting pod** the extender's filter calls while the fitting pods were placed, over
their number; **retries** the extender's window retries in that time; **attempts/s** the scheduler's
scheduling attempts (``scheduler_schedule_attempts_total``) in that time, per second. Then, the fitting
pods placed and the backlog still waiting: the scheduler's attempts in 15 quiet seconds, and its attempts
and the extender's filter calls in the 15 seconds after one update of a Node (what each kubelet status
update, node-agent annotation or node event costs while the backlog waits).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.scheduler import APISERVER_ARGS, CLIENT_CONNECTION, SCHEDULER_NAME, Api, _in_session
from e2e.controlplane import ControlPlane, Scheduler, Service, extender_scheduler_config, node_manifest, pod_manifest
from extender.core.gates import GATE
from extender.core.window import ENFORCE_MARKER

COLUMNS = [
    "nodes",
    "waiting",
    "fitting",
    "variant",
    "bound",
    "placed/s",
    "x alone",
    "filters/fitting pod",
    "retries",
    "attempts/s",
    "attempts quiet",
    "attempts after update",
    "filters after update",
]
UPDATE_WINDOW_SECONDS = 15.0
RESERVED = "hugepage-extender.io/reserved-hugepages-2Mi"
POOL = "64Gi"
NAMESPACE = "backlog"
TOO_LARGE = "128Gi"  # more than any pool: the in-tree resource filter turns the pod away
NEED = "512Mi"
VARIANTS = {  # (extender entry, waiting pods' need, via the extender, behind the extender's gate)
    "kube-scheduler alone": (False, TOO_LARGE, False, False),
    "extender turns the backlog away": (True, NEED, True, False),
    "backlog in-tree, fitting via extender": (True, TOO_LARGE, True, False),
    "gates: the backlog waits behind the gate": (True, NEED, True, True),
}


async def _create_nodes(api: Api, *, count: int) -> None:
    bodies = []
    for i in range(count):
        blocked = i < count // 2
        labels = {"backlog": "blocked" if blocked else "open"}
        body = node_manifest(f"node-{i:05d}", hugepages_2mi=POOL, cpu="64", memory="256Gi", pods="110", labels=labels)
        if blocked:
            body["metadata"]["annotations"] = {RESERVED: POOL}
        bodies.append(body)
    await api.create_all("/api/v1/nodes", bodies)


def _pods(tag: str, count: int, *, half: str, need: str, marked: bool, gated: bool) -> list[dict[str, Any]]:
    """As the chart's marker policy leaves them: the enforce marker, and with gates the extender's gate."""
    extended = {ENFORCE_MARKER: "1"} if marked else None
    return [
        pod_manifest(
            f"{tag}-{i:05d}",
            scheduler_name=SCHEDULER_NAME,
            hugepages_2mi=need,
            labels={"role": tag},
            node_selector={"backlog": half},
            extended=extended,
            scheduling_gates=[GATE] if gated else [],
        )
        for i in range(count)
    ]


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None


class _Pod(msgspec.Struct):
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)


class _PodList(msgspec.Struct):
    items: list[_Pod]


_pod_list = msgspec.json.Decoder(_PodList)


async def _bound(api: Api, role: str) -> int:
    answer = await api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=role%3D{role}")
    return sum(1 for pod in _pod_list.decode(answer).items if pod.spec.nodeName)


async def _place(api: Api, *, bodies: list[dict[str, Any]], role: str, timeout: float) -> tuple[float, int]:
    """Create the pods at once; (first creation -> last bind, pods bound) within ``timeout``."""
    started = time.perf_counter()
    await api.create_all(f"/api/v1/namespaces/{NAMESPACE}/pods", bodies)
    bound = 0
    while time.perf_counter() - started < timeout:
        bound = await _bound(api, role)
        if bound == len(bodies):
            break
        await asyncio.sleep(0.2)
    return time.perf_counter() - started, bound


def _counter(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _extender_counter(extender: Service, name: str) -> float:
    answer = extender.get("/metrics")
    assert answer is not None
    assert answer[0] == 200
    return _counter(answer[1].decode(), name)


def run(
    *,
    nodes: int = 1000,
    waiting: int = 2000,
    fitting: int = 500,
    settle_seconds: float = 20.0,
    timeout: float = 300.0,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hugepage-backlog-") as scratch:
        root = workdir or Path(scratch)
        cp = ControlPlane(root / "cp", apiserver_args=APISERVER_ARGS, scheduler_verbosity=1)
        with cp:
            api = Api(cp.apiserver_url, cp.admin_ssl_context())
            asyncio.run(_in_session(api, functools.partial(_create_nodes, count=nodes)))
            asyncio.run(
                _in_session(api, lambda a: a.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}))
            )
            config = root / "extender-backlog.yaml"
            config.write_text(json.dumps({"defaults": {"mode": "enforce"}}))
            extender = cp.start_extender(
                ["--kubeconfig", str(cp.kubeconfig), "--config", str(config)],
                name="hugepage-extender-backlog",
                ready_path="/readyz",
                env={**os.environ, "LOG_LEVEL": "WARNING"},
                timeout=180,
            )
            for variant, (entry, need, marked, gated) in VARIANTS.items():
                shape = (entry, need, marked, gated)
                row = _variant(cp, api, extender, variant, shape, nodes, waiting, fitting, settle_seconds, timeout)
                log(f"backlog: {row}")
                rows.append(row)
            extender.stop()
    alone = rows[0]["placed/s"]
    for row in rows:
        row["x alone"] = row["placed/s"] / alone if alone else float("nan")
    return rows


def _variant(  # noqa: PLR0917 (one row of the table and what it runs on)
    cp: ControlPlane,
    api: Api,
    extender: Service,
    variant: str,
    shape: tuple[bool, str, bool, bool],
    nodes: int,
    waiting: int,
    fitting: int,
    settle_seconds: float,
    timeout: float,
) -> dict[str, Any]:
    entry, need, marked, gated = shape
    tag = ("ext" if need == NEED else "tree") + ("-marked" if marked else "") + ("-gated" if gated else "")
    if entry:
        config = extender_scheduler_config(
            extender.url,
            scheduler_name=SCHEDULER_NAME,
            percentage_of_nodes_to_score=0,
            http_timeout="30s",
            extender={"managedResources": [{"name": ENFORCE_MARKER, "ignoredByScheduler": True}]},
        )
    else:
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": SCHEDULER_NAME, "percentageOfNodesToScore": 0}],
        }
    config["clientConnection"] = dict(CLIENT_CONNECTION)
    scheduler = cp.start_scheduler(config, name=f"kube-scheduler-backlog-{tag}")
    try:
        backlog = _pods(f"wait-{tag}", waiting, half="blocked", need=need, marked=marked, gated=gated)
        asyncio.run(_in_session(api, lambda a: a.create_all(f"/api/v1/namespaces/{NAMESPACE}/pods", backlog)))
        time.sleep(settle_seconds)  # every waiting pod tried and turned away at least once
        filters, retries = (_extender_counter(extender, name) for name in _EXTENDER_COUNTERS)
        attempts = _counter(scheduler.metrics(), "scheduler_schedule_attempts_total")
        bodies = _pods(f"fit-{tag}", fitting, half="open", need=NEED, marked=marked, gated=gated)
        seconds, bound = asyncio.run(
            _in_session(api, functools.partial(_place, bodies=bodies, role=f"fit-{tag}", timeout=timeout))
        )
        attempts = _counter(scheduler.metrics(), "scheduler_schedule_attempts_total") - attempts
        filters = _extender_counter(extender, _EXTENDER_COUNTERS[0]) - filters
        retries = _extender_counter(extender, _EXTENDER_COUNTERS[1]) - retries
        quiet, after, filters_after = _one_node_update(api, scheduler, extender, tag)
    finally:
        scheduler.stop()
        asyncio.run(
            _in_session(api, lambda a: a.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods?gracePeriodSeconds=0"))
        )
        time.sleep(5)  # the pods gone before the next variant
    return {
        "nodes": nodes,
        "waiting": waiting,
        "fitting": fitting,
        "variant": variant,
        "bound": bound,
        "placed/s": bound / seconds,
        "filters/fitting pod": filters / fitting,
        "retries": retries,
        "attempts/s": attempts / seconds,
        "attempts quiet": quiet,
        "attempts after update": after,
        "filters after update": filters_after,
    }


def _one_node_update(api: Api, scheduler: Scheduler, extender: Service, tag: str) -> tuple[float, float, float]:
    """With the backlog waiting and nothing else happening: the scheduler's attempts in a quiet
    ``UPDATE_WINDOW_SECONDS``, then its attempts and the extender's filter calls in the same time after one
    Node update (a label no pod selects, as a kubelet's status update or a node agent's annotation is an
    update of a Node)."""
    attempts = _counter(scheduler.metrics(), "scheduler_schedule_attempts_total")
    time.sleep(UPDATE_WINDOW_SECONDS)
    quiet = _counter(scheduler.metrics(), "scheduler_schedule_attempts_total") - attempts
    attempts += quiet
    filters = _extender_counter(extender, _EXTENDER_COUNTERS[0])
    patch = {"metadata": {"labels": {"backlog-touched": tag}}}

    async def touch(a: Api) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with a.session.patch(
            "/api/v1/nodes/node-00000", data=msgspec.json.encode(patch), headers=headers
        ) as answer:
            answer.raise_for_status()

    asyncio.run(_in_session(api, touch))
    time.sleep(UPDATE_WINDOW_SECONDS)
    after = _counter(scheduler.metrics(), "scheduler_schedule_attempts_total") - attempts
    return quiet, after, _extender_counter(extender, _EXTENDER_COUNTERS[0]) - filters


_EXTENDER_COUNTERS = ("hugepage_extender_filter_outcomes_total", "hugepage_extender_window_retries_total")
