"""``explain`` says what the filter does: node by node, the same verdict and the same reason.

One snapshot (nodes with and without pools, a pool held outside pods by annotation, agents'
records fresh, stale for one namespace's ``nodeReportMaxAgeSeconds``, with NUMA figures),
pods of several namespaces (one ``numaAligned``, whose Guaranteed pods need one NUMA node).
The filter is asked over HTTP of a real ``Extender`` serving that snapshot, one node a call;
``hugepage-extender explain --snapshot`` is run on the same file. The same over the real
control plane with ``kubectl hugepages explain``: e2e/cluster/test_explain_live.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from extender.cli import main as cli_main
from extender.shell.configfile import load_config
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.shell.server import create_app
from extender.shell.snapshot import load_snapshot
from extender.state.cluster import ClusterState
from tests.conftest import make_node, make_pod
from tests.verdicts import of_explanation, of_filter_answer

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
RESOURCE = "hugepages-2Mi"
CONFIG = {
    "defaults": {"mode": "enforce"},
    "namespaces": {"dpdk": {"numaAligned": True}, "strict": {"nodeReportMaxAgeSeconds": 60}},
}


def record(name: str, *, age: float, outside: int, numa_free: tuple[int, ...] = ()) -> dict[str, Any]:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age))
    numa = {
        str(n): {"totalPages": 512, "freePages": free, "reservedPages": None, "surplusPages": 0,
                 "podPages": None, "outsidePages": None}
        for n, free in enumerate(numa_free)
    }  # fmt: skip
    size = {"totalPages": 1024, "freePages": 1024 - outside, "reservedPages": 0, "surplusPages": 0,
            "podPages": 0, "outsidePages": outside, "numa": numa}  # fmt: skip
    report = {"observedAt": at, "source": "cgroup-v2", "pageSizes": {RESOURCE: size}}
    return {"kind": "HugepageNodeReport", "metadata": {"name": name}, "report": report}


def guaranteed(pod: dict[str, Any]) -> dict[str, Any]:
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"].update(cpu="1", memory="1Gi")
    resources["limits"] = dict(resources["requests"])
    return pod


NODES = [
    make_node("roomy", hugepages="2Gi"),
    make_node("no-pool"),
    make_node("held-by-hand", hugepages="2Gi", reserved="1800Mi"),
    make_node("numa", hugepages="2Gi"),  # NUMA nodes with 150 and 300 pages free
    make_node("reported-full", hugepages="2Gi"),  # its record: 900 pages outside pods, 120 s old
    make_node("busy", hugepages="1Gi"),
]
BOUND = [make_pod("tenant", "other", hugepages="900Mi", node="busy", phase="Running")]
REPORTS = [record("numa", age=10, outside=0, numa_free=(150, 300)), record("reported-full", age=120, outside=900)]
PODS = [
    guaranteed(msgspec.to_builtins(make_pod("pinned", "dpdk", hugepages="800Mi"))),  # 400 pages: no NUMA node has them
    guaranteed(msgspec.to_builtins(make_pod("small-pinned", "dpdk", hugepages="400Mi"))),  # 200: NUMA node 1 has them
    msgspec.to_builtins(make_pod("loose", "dpdk", hugepages="800Mi")),  # not Guaranteed: no NUMA rule
    msgspec.to_builtins(make_pod("web", "default", hugepages="512Mi")),
    msgspec.to_builtins(make_pod("strict", "strict", hugepages="512Mi")),  # the stale record counts for nothing
    msgspec.to_builtins(make_pod("huge", "default", hugepages="3Gi")),
]
for pod in PODS:
    pod["metadata"]["uid"] = ""  # holds nothing: every call sees the snapshot as it is


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    snapshot = {"kind": "List", "items": [
        *({"kind": "Node", **msgspec.to_builtins(n)} for n in NODES),
        *({"kind": "Pod", **msgspec.to_builtins(p)} for p in BOUND),
        *REPORTS,
    ]}  # fmt: skip
    out = {"snapshot": tmp_path / "snapshot.yaml", "config": tmp_path / "config.yaml"}
    out["snapshot"].write_text(yaml.safe_dump(snapshot))
    out["config"].write_text(yaml.safe_dump(CONFIG))
    for pod in PODS:
        out[pod["metadata"]["name"]] = tmp_path / f"{pod['metadata']['name']}.yaml"
        out[pod["metadata"]["name"]].write_text(yaml.safe_dump(pod))
    return out


def explained(files: dict[str, Path], pod: str) -> dict[str, Any]:
    out = io.StringIO()
    argv = ["explain", "--snapshot", str(files["snapshot"]), "--config", str(files["config"])]
    with contextlib.redirect_stdout(out):
        assert cli_main([*argv, "--pod", str(files[pod]), "--output", "json"]) == 0
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


async def test_explain_gives_the_filters_verdict_on_every_node(
    aiohttp_client: ClientFactory, files: dict[str, Path]
) -> None:
    config = load_config(files["config"], environ={})
    state = ClusterState(config)
    snapshot = load_snapshot(files["snapshot"])
    state.replace(snapshot.nodes, snapshot.pods, snapshot.reports)
    client = await aiohttp_client(create_app(Extender(config, state, Metrics(), rng=random.Random(1))))
    seen: set[tuple[str, str]] = set()
    for pod in PODS:
        name = pod["metadata"]["name"]
        rows = {row["node"]: row for row in explained(files, name)["nodes"]}
        assert set(rows) == {n.metadata.name for n in NODES}
        for node, row in rows.items():
            answer = await client.post("/filter", json={"Pod": pod, "NodeNames": [node]})
            said = of_filter_answer(msgspec.json.decode(await answer.read()), node)
            assert of_explanation(row, RESOURCE) == said, (name, node, row)
            seen.add((row["verdict"], said[0]))
    # Every kind of verdict was compared, the NUMA rule and the stale record among them.
    verdicts = {verdict for verdict, _ in seen}
    assert {"fits", "insufficient", "no NUMA node fits", "no pool", "exceeds pool", "held outside pods"} <= verdicts
