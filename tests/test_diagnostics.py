"""What only the running extender knows: holds per node, the state document, pools summed, waiting pods.

Tables with the arithmetic written out; then the endpoint and the new metrics through
aiohttp's test client over a real Extender.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from extender.cli import main as cli_main
from extender.core.capacity import NodeAccount
from extender.core.config import DEFAULT_RESOURCE
from extender.core.diagnostics import (
    NodeHolds,
    StateDocumentError,
    format_bytes,
    holds_per_node,
    node_rows,
    parse_state_document,
    pool_totals,
    render_node_rows,
    state_document,
    with_holds,
)
from extender.core.holds import Hold
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy, PolicyTable
from extender.core.waiting import Waiting, WaitingPods
from extender.shell.diagnose import PodNameError, split_pod_name
from extender.shell.handlers import Extender
from extender.shell.kube.live import context_namespace
from extender.shell.kubectl_plugin import main as plugin_main
from extender.shell.metrics import Metrics
from extender.shell.server import create_app, create_probe_app
from extender.state.explain import explain, render_table
from tests.conftest import ROOT, make_account, make_extender, make_node, make_pod, make_state, pod_json

MI = 1 << 20
GI = 1 << 30
PAGE = 2 * MI

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


# --------------------------------------------------------------------------- pure pieces


def test_holds_per_node_counts_a_pod_once_on_each_node_it_is_held_on() -> None:
    holds = {
        "a": Hold(("n1", "n2"), 512 * MI, 1000, 30.0),  # best-of-K: held on both
        "b": Hold(("n1",), 256 * MI, 500, 30.0),
        "c": Hold(("n3",), GI, 0, 30.0),
    }
    assert holds_per_node(holds) == {
        "n1": NodeHolds(768 * MI, 1500, 2),  # a + b
        "n2": NodeHolds(512 * MI, 1000, 1),
        "n3": NodeHolds(GI, 0, 1),
    }
    # Named nodes: each answered, zero when nothing is held; a pod's own hold left out.
    assert holds_per_node(holds, ["n1", "n4"], exclude_uid="b") == {
        "n1": NodeHolds(512 * MI, 1000, 1),
        "n4": NodeHolds(),
    }


def test_state_document_round_trips_and_holds_no_pod_identity() -> None:
    placement = PolicyTable(
        defaults=Policy(),
        namespaces={"vms": Policy(mode=Mode.ENFORCE, need_from_memory=True)},
        exempt_namespaces=frozenset({"hugepage-extender"}),
    )
    holds = holds_per_node({"uid-secret-pod": Hold(("n1",), GI, 250, 9.0)})
    document = state_document(
        ready=True,
        namespace="vms",
        policy=placement.policy_for("vms"),
        exempt=False,
        holds_by_size={"hugepages-2Mi": holds},
        placement=placement,
    )
    body = json.dumps(document).encode()
    assert b"uid-secret-pod" not in body
    state = parse_state_document(body)
    assert state.policy == Policy(mode=Mode.ENFORCE, need_from_memory=True)
    assert state.holds_by_size["hugepages-2Mi"] == {"n1": NodeHolds(GI, 250, 1)}
    assert state.placement == placement
    assert state.node_reports is None
    # The keys scripts read are fixed (version 1).
    assert list(document) == [
        "version",
        "resourceName",
        "ready",
        "namespace",
        "policy",
        "exempt",
        "inFlight",
        "placement",
        "nodeReports",
        "resourceNames",
        "sizes",
        "gateLifter",
    ]
    assert state.resource_names == ("hugepages-2Mi",)
    with pytest.raises(StateDocumentError, match="version 2"):
        parse_state_document(json.dumps({**document, "version": 2}).encode())
    with pytest.raises(StateDocumentError):
        parse_state_document(b"<html>not json</html>")


def test_pool_totals_count_in_flight_only_up_to_what_a_pool_has_left() -> None:
    accounts = [
        make_account(512, used=256, reserved=128),  # 1Gi pool: 512Mi pods, 256Mi outside
        make_account(512, used=256, reserved=128, held_bytes=GI),  # 1Gi in flight, only 256Mi (128 pages) left
        NodeAccount(),  # no pool: not counted
    ]
    assert pool_totals(accounts).capacity_bytes == 2 * GI
    assert pool_totals(accounts).pods_bytes == 2 * 512 * MI
    assert pool_totals(accounts).outside_pods_bytes == 2 * 256 * MI
    assert pool_totals(accounts).in_flight_bytes == 128 * PAGE


def test_with_holds_adds_the_extenders_placements_to_what_the_api_shows() -> None:
    accounts = {"n1": make_account(512, used=256), "n2": make_account(512)}
    held = with_holds(accounts, {"n1": NodeHolds(512 * MI, 500, 1), "gone": NodeHolds(GI, 0, 1)})
    assert held["n1"].held_bytes == 512 * MI
    assert held["n1"].held_cpu_millis == 500
    assert held["n2"] == accounts["n2"]
    assert "gone" not in held


def test_explain_says_when_only_holds_in_flight_keep_a_pod_off_a_node() -> None:
    # n1: 1Gi pool, 512Mi used, 512Mi held in flight by another pod: a 512Mi pod would fit without it.
    # n2: 1Gi pool, all used: insufficient whatever is in flight.
    accounts = with_holds(
        {"n1": make_account(512, used=256), "n2": make_account(512, used=512)}, {"n1": NodeHolds(512 * MI, 0, 1)}
    )
    result = explain(
        "default/p",
        PodDemand({DEFAULT_RESOURCE: 512 * MI}, cpu_millis=0),
        ["n1", "n2"],
        resource_name="hugepages-2Mi",
        accounts=accounts,
        policy=Policy(mode=Mode.ENFORCE),
        sources={"in flight": "the extender at https://x"},
    )
    rows = {n.node: n for n in result.nodes}
    assert rows["n1"].verdict == "insufficient"
    assert rows["n1"].blocked_by_inflight
    assert rows["n1"].inflight_pages == 256
    assert not rows["n2"].blocked_by_inflight
    assert result.summary.startswith("no node can hold the pod now: 1 would, but placements in flight hold their room")
    table = render_table(result)
    assert "insufficient (in flight)" in table
    assert "in flight: the extender at https://x" in table
    assert [n["blocked_by_inflight"] for n in result.as_dict()["nodes"]] == [True, False]  # type: ignore[attr-defined]


def test_node_rows_in_bytes() -> None:
    rows = node_rows(
        {"b": make_account(512, used=128, reserved=64), "a": NodeAccount(), "c": make_account(1024)},
        {"b": NodeHolds(256 * MI, 0, 2)},
    )
    assert [r.node for r in rows] == ["b", "c", "a"]  # pools first, then the nodes without one
    b = rows[0]
    assert (b.pool_bytes, b.pods_bytes, b.outside_pods_bytes, b.in_flight_bytes, b.in_flight_pods) == (
        GI,
        256 * MI,
        128 * MI,
        256 * MI,
        2,
    )
    assert b.free_bytes == GI - 256 * MI - 128 * MI - 256 * MI
    table = render_node_rows(rows, with_extender=True)
    assert table.splitlines()[1].split() == ["b", "1Gi", "256Mi", "128Mi", "256Mi", "(2)", "384Mi", "-"]


@pytest.mark.parametrize(
    ("nbytes", "text"), [(0, "0"), (GI, "1Gi"), (768 * MI, "768Mi"), (3 * GI // 2, "1536Mi"), (PAGE + 1, "2.0Mi")]
)
def test_format_bytes(nbytes: int, text: str) -> None:
    assert format_bytes(nbytes) == text


def test_waiting_pods_from_first_refusal_until_placed_or_forgotten() -> None:
    waiting = WaitingPods(forget_after_seconds=600)
    waiting.unplaced("a", 100.0)
    waiting.unplaced("b", 160.0)
    waiting.unplaced("a", 400.0)  # asked about again: still waiting since 100
    assert waiting.summary(460.0) == Waiting(count=2, oldest_seconds=360.0)  # 460 - 100
    waiting.placed("a")
    assert waiting.summary(460.0) == Waiting(count=1, oldest_seconds=300.0)  # 460 - 160
    # b not asked about for over 600 s: deleted, or placed by someone else.
    assert waiting.summary(761.0).count == 0
    # Not waiting by the watch (bound, deleted): dropped at once.
    waiting.unplaced("c", 800.0)
    assert waiting.summary(801.0, lambda uid: uid != "c").count == 0


# --------------------------------------------------------------------------- over HTTP

CONFIG = {
    "defaults": {"mode": "enforce", "sampleSize": 3},
    "namespaces": {"canary": {"mode": "shadow"}, "vms": {"mode": "enforce", "needFromMemory": True}},
}
NODES = [make_node("roomy", hugepages="4Gi"), make_node("full", hugepages="1Gi", reserved="1Gi")]


@pytest.fixture
def extender() -> Extender:
    return make_extender(make_state(CONFIG, NODES, exempt=frozenset({"hugepage-extender"})))


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_state_shows_holds_policy_and_not_the_pod(aiohttp_client: ClientFactory, extender: Extender) -> None:
    client = await aiohttp_client(create_app(extender))
    pod = make_pod("web-0", "default", uid="uid-web-0", hugepages="1Gi", cpu="1")
    answer = await client.post("/filter", json={"Pod": pod_json(pod), "NodeNames": ["roomy", "full"]})
    assert msgspec.json.decode(await answer.read())["NodeNames"] == ["roomy"]

    response = await client.get("/debug/state", params={"namespace": "vms", "nodes": "roomy,full"})
    assert response.status == 200
    assert response.headers["Cache-Control"] == "no-store"
    body = await response.read()
    assert b"uid-web-0" not in body
    assert b"web-0" not in body
    state = parse_state_document(body)
    assert state.holds_by_size[DEFAULT_RESOURCE] == {"roomy": NodeHolds(GI, 1000, 1), "full": NodeHolds()}
    assert state.policy.need_from_memory
    assert state.ready

    # The pod's own hold is left out when it asks about itself.
    mine = await client.get("/debug/state", params={"namespace": "default", "excludePod": "uid-web-0"})
    assert parse_state_document(await mine.read()).holds_by_size[DEFAULT_RESOURCE] == {}
    too_many = await client.get("/debug/state", params={"nodes": ",".join(f"n{i}" for i in range(101))})
    assert too_many.status == 400


async def test_state_is_not_on_the_plain_probe_port(aiohttp_client: ClientFactory, extender: Extender) -> None:
    probe = await aiohttp_client(create_probe_app(extender))
    assert (await probe.get("/debug/state")).status == 404


async def test_metrics_for_pools_waiting_pods_and_shadow(aiohttp_client: ClientFactory, extender: Extender) -> None:
    client = await aiohttp_client(create_app(extender))
    # 5Gi of pools; "full" holds its whole 1Gi outside pods.
    before = samples(extender.metrics)
    assert before[("hugepage_extender_pool_capacity_bytes", (("resource", "hugepages-2Mi"),))] == 5 * GI
    held = {
        holder: before[("hugepage_extender_pool_held_bytes", (("holder", holder), ("resource", "hugepages-2Mi")))]
        for holder in ("pods", "outside_pods", "in_flight")
    }
    assert held == {"pods": 0, "outside_pods": GI, "in_flight": 0}

    # Enforced, too large for any pool left (roomy has 4Gi): it waits.
    big = make_pod("big", "default", uid="uid-big", hugepages="8Gi")
    extender.state.apply_pod(big)  # the watch shows it Pending
    await client.post("/filter", json={"Pod": pod_json(big), "NodeNames": ["roomy", "full"]})
    # The same, named only in a request: no pod that waits.
    ghost = make_pod("ghost", "default", uid="uid-ghost", hugepages="8Gi")
    await client.post("/filter", json={"Pod": pod_json(ghost), "NodeNames": ["roomy", "full"]})
    # Shadow: only "full" offered, which enforce would reject: a would-be Pending pod.
    shadow = make_pod("s", "canary", uid="uid-s", hugepages="1Gi")
    await client.post("/filter", json={"Pod": pod_json(shadow), "NodeNames": ["full"]})
    # Shadow with a node that fits: not counted.
    await client.post("/filter", json={"Pod": pod_json(shadow), "NodeNames": ["roomy", "full"]})
    after = samples(extender.metrics)
    assert after[("hugepage_extender_waiting_pods", ())] == 1
    assert after[("hugepage_extender_waiting_pod_max_age_seconds", ())] >= 0
    assert after[("hugepage_extender_shadow_rejected_pods_total", (("pod_namespace", "canary"),))] == 1

    # A later call that admits a node ends the wait (the pod resized to 2Gi).
    fits = make_pod("big", "default", uid="uid-big", hugepages="2Gi")
    extender.state.apply_pod(fits)
    await client.post("/filter", json={"Pod": pod_json(fits), "NodeNames": ["roomy", "full"]})
    assert samples(extender.metrics)[("hugepage_extender_waiting_pods", ())] == 0
    assert (
        samples(extender.metrics)[
            ("hugepage_extender_pool_held_bytes", (("holder", "in_flight"), ("resource", "hugepages-2Mi")))
        ]
        == 2 * GI
    )


# --------------------------------------------------------------------------- command-line edges


@pytest.mark.parametrize(
    ("value", "expected"),
    [("payments/router", ("payments", "router")), ("router", ("ctx-ns", "router"))],
)
def test_pod_names(value: str, expected: tuple[str, str]) -> None:
    assert split_pod_name(value, "ctx-ns") == expected


@pytest.mark.parametrize("value", ["a/b/c", "payments/", ""])
def test_bad_pod_names(value: str) -> None:
    with pytest.raises(PodNameError):
        split_pod_name(value)


def test_extender_flag_needs_a_live_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    pod = ROOT / "examples" / "pod-2gi.yaml"
    assert cli_main(["explain", "--pod", str(pod), "--extender", "https://x:8888"]) == 2
    assert "--extender needs a live cluster" in capsys.readouterr().err


def test_plugin_reports_an_unreachable_api_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: team}}]\n"
    )
    assert plugin_main(["nodes", "--kubeconfig", str(kubeconfig)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: list nodes:"), err
    assert len(err.strip().splitlines()) == 1
    assert context_namespace(kubeconfig) == "team"


def test_explanation_json_keys_are_stable() -> None:
    result = explain(
        "default/p",
        PodDemand({DEFAULT_RESOURCE: GI}, cpu_millis=0),
        ["n1"],
        resource_name="hugepages-2Mi",
        accounts={"n1": make_account(512)},
        policy=Policy(),
    )
    document = result.as_dict()
    # Scripts read these; new keys may be added, none renamed or removed.
    assert list(document) == [
        "pod",
        "resource_name",
        "need_bytes",
        "cpu_millis",
        "mode",
        "nodes",
        "node_report_max_age_seconds",
        "sources",
        "more",
        "verdicts",
        "summary",
        "fallback",
    ]
    assert list(document["nodes"][0]) == [  # type: ignore[index]
        "node",
        "known",
        "pool_pages",
        "used_pages",
        "reserved_pages",
        "inflight_pages",
        "free_pages",
        "need_pages",
        "verdict",
        "load",
        "score",
        "blocked_by_inflight",
        "report",
        "report_age_seconds",
        "report_source",
        "report_total_pages",
        "report_outside_pages",
        "report_reason",
    ]
