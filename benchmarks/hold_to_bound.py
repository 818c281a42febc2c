"""How long a placement stays held in flight on the real kube-scheduler: the replay's calibration.

The extender holds a pod's need on the nodes its filter admitted until the pod
shows up bound in its cache (``hugepage_extender_hold_to_bound_seconds``). The
replay (``replay``) models that time as ``bindDelaySeconds``; this
measures it with the real kube-scheduler binding asynchronously and the
extender's real watch, in two regimes:

- ``steady``: pods created one by one at a fixed rate while the scheduler runs
  (pods arriving over time, as the replay's clients send them);
- ``burst``: a batch created at once while the scheduler runs (the queue
  fills; binds wait behind the scheduling of later pods).

Figures come from the extender's own histogram, scraped before and after each
regime; quantiles are interpolated within buckets as PromQL's
``histogram_quantile`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.scheduler import APISERVER_ARGS, SCHEDULER_NAME, Api, BindWatch, _create_nodes, _in_session
from e2e.controlplane import ControlPlane, extender_scheduler_config, http_get, pod_manifest

METRIC = "hugepage_extender_hold_to_bound_seconds"
COLUMNS = ["regime", "pods", "rate /s", "bound", "holds ended bound", "mean s", "p50 s", "p90 s", "p99 s"]

Buckets = list[tuple[float, float]]  # (upper bound, cumulative count), +Inf last


def scrape(port: int) -> tuple[Buckets, float]:
    """The histogram's cumulative buckets and its sum, from the extender's ``/metrics``."""
    answer = http_get(port, "/metrics")
    if answer is None or answer[0] != 200:
        raise RuntimeError(f"cannot scrape the extender's /metrics on port {port}")
    for family in text_string_to_metric_families(answer[1].decode()):
        if family.name == METRIC:
            buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name == f"{METRIC}_bucket")
            total = next(s.value for s in family.samples if s.name == f"{METRIC}_sum")
            return buckets, total
    raise RuntimeError(f"{METRIC} is not exported")


def quantile(q: float, buckets: Buckets) -> float:
    """PromQL's ``histogram_quantile``: linear within the bucket that holds rank ``q``."""
    total = buckets[-1][1]
    if total <= 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below) if count > below else upper
        lower, below = upper, count
    return lower


def delta(after: Buckets, before: Buckets) -> Buckets:
    return [(upper, count - dict(before).get(upper, 0.0)) for upper, count in after]


async def _create_namespace(api: Api, *, name: str) -> None:
    await api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})


async def _create_paced(api: Api, namespace: str, names: Sequence[str], rate: float | None) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"
    bodies = [
        pod_manifest(name, scheduler_name=SCHEDULER_NAME, hugepages_2mi="256Mi", cpu="100m", memory="64Mi")
        for name in names
    ]
    if rate is None:
        await api.create_all(path, bodies)
        return
    started = time.perf_counter()
    for index, body in enumerate(bodies):
        await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
        await api.request("POST", path, body)


def run(
    *,
    nodes: int = 50,
    steady: tuple[int, float] = (200, 10.0),
    burst: int = 200,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hugepage-hold-")))
        cp = stack.enter_context(ControlPlane(workdir / "cp", apiserver_args=APISERVER_ARGS))
        api = Api(cp.apiserver_url, cp.admin_ssl_context())
        asyncio.run(_in_session(api, functools.partial(_create_nodes, first=0, last=nodes)))
        config = workdir / "extender.yaml"
        config.write_text(json.dumps({"defaults": {"mode": "enforce", "sampleSize": 3}}))
        extender = cp.start_extender(
            ["--kubeconfig", str(cp.kubeconfig), "--config", str(config)],
            ready_path="/readyz",
            env={**os.environ, "LOG_LEVEL": "WARNING"},
            timeout=120,
        )
        scheduler_config = extender_scheduler_config(extender.url, scheduler_name=SCHEDULER_NAME)
        cp.start_scheduler(scheduler_config, name="kube-scheduler-hold")
        regimes: list[tuple[str, int, float | None]] = [("steady", steady[0], steady[1]), ("burst", burst, None)]
        for regime, count, rate in regimes:
            namespace = f"hold-{regime}"
            asyncio.run(_in_session(api, functools.partial(_create_namespace, name=namespace)))
            before, sum_before = scrape(extender.port)
            watch = BindWatch(api, namespace, count)
            watch.start()
            names = [f"p-{i:05d}" for i in range(count)]
            asyncio.run(_in_session(api, functools.partial(_create_paced, namespace=namespace, names=names, rate=rate)))
            bound = watch.wait(timeout=300)
            time.sleep(1.0)  # the extender's watch may trail the benchmark's by a moment
            after, sum_after = scrape(extender.port)
            buckets = delta(after, before)
            ended = buckets[-1][1]
            mean = (sum_after - sum_before) / ended if ended else float("nan")
            row = {
                "regime": regime,
                "pods": count,
                "rate /s": rate if rate is not None else "all at once",
                "bound": len(bound),
                "holds ended bound": int(ended),
                "mean s": mean,
                "p50 s": quantile(0.5, buckets),
                "p90 s": quantile(0.9, buckets),
                "p99 s": quantile(0.99, buckets),
            }
            log(f"hold-to-bound: {regime}: {row['holds ended bound']} holds, mean {mean:.4f} s")
            rows.append(row)
    return rows
