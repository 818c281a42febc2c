"""Every hugepage size the cluster has: the config, a pod's need per size, the state's accounts per
size (pools, pods, holds, pages held outside pods, node agents' records) and the verbs over them."""

from __future__ import annotations

import random
import time
from typing import Any

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import sizes as sizes_benchmark
from extender.core.answer import Outcome, Reasons
from extender.core.capacity import Fit
from extender.core.config import ConfigError, build_config
from extender.core.diagnostics import node_rows, parse_state_document, render_node_rows
from extender.core.objects import Node, Pod
from extender.core.policy import Mode
from extender.shell.handlers import Extender
from extender.shell.kube.events import event_for
from extender.shell.metrics import Metrics
from extender.shell.scrape import MetricsPage
from extender.shell.server import create_app
from extender.state.cluster import ClusterState
from extender.state.explain import explain_pod, render_table
from extender.state.verbs import ExtenderVerbs
from tests.conftest import Clock

MIB = 1 << 20
GIB = 1 << 30
TWO = {"resourceNames": ["hugepages-2Mi", "hugepages-1Gi"], "defaults": {"mode": "enforce", "sampleSize": 3}}
NOW = 1_800_000_000.0


def node(
    name: str, *, small: str | None = None, large: str | None = None, annotations: dict[str, str] | None = None
) -> Node:
    allocatable: dict[str, Any] = {"cpu": "16", "memory": "64Gi"}
    if small is not None:
        allocatable["hugepages-2Mi"] = small
    if large is not None:
        allocatable["hugepages-1Gi"] = large
    metadata: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    return msgspec.convert({"metadata": metadata, "status": {"allocatable": allocatable}}, Node)


def pod(name: str, *, small: str | None = None, large: str | None = None, memory: str | None = None,
        node_name: str | None = None, namespace: str = "default") -> Pod:  # fmt: skip
    requests: dict[str, Any] = {"cpu": "1"}
    for resource, value in (("hugepages-2Mi", small), ("hugepages-1Gi", large), ("memory", memory)):
        if value is not None:
            requests[resource] = value
    document: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": "Running" if node_name else "Pending"},
    }
    if node_name:
        document["spec"]["nodeName"] = node_name
    return msgspec.convert(document, Pod)


NODES = [
    node("small-only", small="1Gi"),  # 512 x 2 MiB
    node("large-only", large="4Gi"),  # 4 x 1 GiB
    node("both", small="1Gi", large="4Gi"),
    node("neither"),
]


def two_sizes(config: dict[str, Any] | None = None) -> tuple[ClusterState, ExtenderVerbs]:
    built = build_config(config or TWO, {})
    state = ClusterState(built, wall_clock=Clock(NOW))
    state.replace(NODES, [])
    return state, ExtenderVerbs(built, state, rng=random.Random(1))


# -- config -----------------------------------------------------------------------------------


def test_resource_names_lists_every_size_guarded_and_resource_name_is_one() -> None:
    config = build_config(TWO, {})
    assert config.resource_names == ("hugepages-2Mi", "hugepages-1Gi")
    books = ClusterState(config).books
    assert (config.resource_names[0], books["hugepages-2Mi"].page_size) == ("hugepages-2Mi", 2 * MIB)
    assert books["hugepages-1Gi"].page_size == GIB
    assert build_config({"resourceName": "hugepages-1Gi"}, {}).resource_names == ("hugepages-1Gi",)
    assert build_config({}, {}).resource_names == ("hugepages-2Mi",)
    assert build_config({"resourceNames": ["hugepages-1Gi"]}, {}).resource_names == ("hugepages-1Gi",)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"resourceName": "hugepages-2Mi", "resourceNames": ["hugepages-1Gi"]}, "give one of them"),
        ({"resourceNames": []}, "at least one"),
        ({"resourceNames": ["hugepages-2Mi", "hugepages-2Mi"]}, "named twice"),
        ({"resourceNames": ["hugepages-2Mi", "hugepages-2048Ki"]}, "same page size"),
        ({"resourceNames": ["hugepages-2Mi", "memory"]}, "resourceNames: expected a hugepage resource"),
        ({"namespaces": {"vms": {"needFromMemoryResource": "hugepages-1Gi"}}}, r"namespaces\.vms\.needFromMemory"),
        ({"defaults": {"needFromMemoryResource": "hugepages-1G"}}, "needFromMemoryResource"),
    ],
)
def test_bad_size_configs_are_refused_by_key(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(document, {})


# -- a pod's need, per size -------------------------------------------------------------------


def test_a_pods_need_is_read_per_size_and_memory_draws_from_the_namespaces_size() -> None:
    config = {
        **TWO,
        "defaults": {"mode": "enforce", "needFromMemory": True},
        "namespaces": {"gig-vms": {"needFromMemory": True, "needFromMemoryResource": "hugepages-1Gi"}},
    }
    state, _ = two_sizes(config)
    both = state.demand_of(pod("p", small="64Mi", large="2Gi"))
    assert (both.bytes_by_size, both.sizes_needed) == (
        {"hugepages-2Mi": 64 * MIB, "hugepages-1Gi": 2 * GIB},
        ("hugepages-2Mi", "hugepages-1Gi"),
    )
    large_vm = pod("p", large="1Gi", memory="8Gi")
    assert state.demand_of(large_vm).sizes_needed == ("hugepages-1Gi",)  # asks pages: memory unread
    vm = pod("vm", memory="4Gi")
    assert state.demand_of(vm).sizes_needed == ("hugepages-2Mi",)  # the first size by default
    gig_vm = pod("vm", memory="4Gi", namespace="gig-vms")
    gig_need = state.demand_of(gig_vm)
    assert (gig_need.bytes_of("hugepages-2Mi"), gig_need.bytes_of("hugepages-1Gi")) == (0, 4 * GIB)
    assert gig_need.of_one("hugepages-1Gi").hugepage_bytes == 4 * GIB


# -- the filter and the score, per size -------------------------------------------------------


S, L = "hugepages-2Mi", "hugepages-1Gi"


@pytest.mark.parametrize(
    ("asks", "admitted", "rejected"),
    [
        ({"small": "64Mi"}, {"small-only", "both"}, {"large-only": (S, Fit.NO_POOL), "neither": (S, Fit.NO_POOL)}),
        ({"large": "2Gi"}, {"large-only", "both"}, {"small-only": (L, Fit.NO_POOL), "neither": (L, Fit.NO_POOL)}),
        (
            {"small": "64Mi", "large": "2Gi"},
            {"both"},
            {"small-only": (L, Fit.NO_POOL), "large-only": (S, Fit.NO_POOL), "neither": (S, Fit.NO_POOL)},
        ),
        (
            {"small": "64Mi", "large": "8Gi"},
            set(),
            {"small-only": (L, Fit.NO_POOL), "large-only": (S, Fit.NO_POOL), "both": (L, Fit.EXCEEDS_POOL)},
        ),
    ],
)
def test_the_filter_admits_a_node_only_if_each_pool_the_pod_needs_holds_it(
    asks: dict[str, str], admitted: set[str], rejected: dict[str, tuple[str, Fit]]
) -> None:
    _, verbs = two_sizes({**TWO, "defaults": {"mode": "enforce", "sampleSize": 0}})
    decision = verbs.filter_pod(pod("p", **asks), [n.metadata.name for n in NODES]).decision
    assert set(decision.passed) == admitted
    reasons = {**decision.failed, **decision.unresolvable}
    for name, (resource, verdict) in rejected.items():
        # The reason names the size at fault, in the scheduler's event.
        assert reasons[name] == Reasons.for_resource(resource).of(verdict), name
    assert set(reasons) == {n.metadata.name for n in NODES} - admitted
    if not admitted:
        assert decision.outcome is Outcome.NO_COMPATIBLE_NODE


def test_a_two_size_pod_is_held_on_each_size_and_bound_pods_count_per_size() -> None:
    state, verbs = two_sizes()
    result = verbs.filter_pod(pod("p", small="64Mi", large="2Gi"), ["both"])
    assert result.held
    small, large = state.books.values()
    assert small.accounts["both"].held_pages == 32
    assert large.accounts["both"].held_pages == 2
    assert small.accounts["both"].held_cpu_millis == large.accounts["both"].held_cpu_millis == 1000
    # A second pod wanting 3 GiB: the 1 GiB pool is held, the 2 MiB one is not the problem.
    second = verbs.filter_pod(pod("q", large="3Gi"), ["both", "large-only"]).decision
    assert list(second.passed) == ["large-only"]
    assert second.failed["both"] == Reasons.for_resource("hugepages-1Gi").insufficient
    # The first pod shows up bound: its hold ends, its pages count as used, per size.
    state.apply_pod(pod("p", small="64Mi", large="2Gi", node_name="both"))
    assert (small.accounts["both"].used_pages, large.accounts["both"].used_pages) == (32, 2)
    assert (small.accounts["both"].held_pages, large.accounts["both"].held_pages) == (0, 0)
    state.remove_pod("uid-p")
    assert (small.accounts["both"].used_pages, large.accounts["both"].used_pages) == (0, 0)
    verbs.state.release("uid-q")
    assert large.hold_count == 0
    # A pod of the first size alone holds nothing on the 1 GiB accounts.
    assert verbs.filter_pod(pod("r", small="4Mi"), ["both"]).held
    assert (small.hold_count, large.hold_count) == (1, 0)


def test_the_score_is_the_tightest_pool_the_pod_needs() -> None:
    state, verbs = two_sizes()
    # Fill the 1 GiB pool of "both" three quarters: a pod of both sizes ranks it by that pool.
    state.apply_pod(pod("busy", large="3Gi", node_name="both"))
    state.apply_node(node("both-2", small="1Gi", large="4Gi"))
    scores = dict(verbs.prioritize_pod(pod("p", small="2Mi", large="1Gi"), ["both", "both-2"]))
    assert scores["both"] == 0  # 4 of 4 pages after the pod: load 1
    assert scores["both-2"] > scores["both"]
    # A pod of the first size alone does not see the 1 GiB pool at all.
    scores = dict(verbs.prioritize_pod(pod("s", small="2Mi"), ["both", "both-2"]))
    assert scores["both"] == scores["both-2"]


# -- pages held outside pods, node agents' records, NUMA, per size -----------------------------


def record(sizes: dict[str, dict[str, Any]]) -> bytes:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 5))
    figures = {
        name: {"totalPages": f["total"], "freePages": f["free"], "reservedPages": 0, "surplusPages": 0,
               "podPages": 0, "outsidePages": f["outside"],
               "numa": {str(i): {"totalPages": f["total"], "freePages": n} for i, n in enumerate(f.get("numa", ()))}}
        for name, f in sizes.items()
    }  # fmt: skip
    return msgspec.json.encode({"observedAt": at, "source": "cgroup-v2", "pageSizes": figures})


def test_each_size_reads_its_own_figures_of_a_node_agents_record_and_annotation() -> None:
    state, verbs = two_sizes({**TWO, "defaults": {"mode": "enforce", "sampleSize": 0, "numaAligned": True}})
    raw = record({
        "hugepages-2Mi": {"total": 512, "free": 512, "outside": 0},
        "hugepages-1Gi": {"total": 4, "free": 1, "outside": 3, "numa": (1,)},
    })  # fmt: skip
    state.apply_report(*state.report_record("both", raw))
    small, large = state.books.values()
    assert (small.accounts["both"].outside_pods_pages, large.accounts["both"].outside_pods_pages) == (0, 3)
    assert large.report_view("both").report is not None
    decision = verbs.filter_pod(pod("p", large="2Gi"), ["both", "large-only"]).decision
    assert list(decision.passed) == ["large-only"]
    assert decision.unresolvable["both"] == Reasons.for_resource("hugepages-1Gi").held_outside
    # Relisted without the record: both sizes forget it.
    state.replace_reports([])
    assert large.accounts["both"].outside_pods_pages == 0
    # The manual annotation names its size.
    state.apply_node(
        node("both", small="1Gi", large="4Gi", annotations={"hugepage-extender.io/reserved-hugepages-1Gi": "1Gi"})
    )
    assert (small.accounts["both"].outside_pods_pages, large.accounts["both"].outside_pods_pages) == (0, 1)


def test_a_one_size_cluster_has_no_further_states_and_no_further_fields() -> None:
    state = ClusterState(build_config({}, {}))
    state.replace(NODES, [pod("b", small="4Mi", node_name="both")])
    assert list(state.books) == ["hugepages-2Mi"]
    usage = state.pod_record(pod("b", small="4Mi", node_name="both")).usage
    assert usage is not None
    assert usage.pages == (2,)
    assert list(state.node_record(NODES[0])[1].pools) == ["hugepages-2Mi"]
    assert list(state.demand_of(pod("p", small="2Mi", large="1Gi")).bytes_by_size) == ["hugepages-2Mi"]


def test_shadow_counts_a_two_size_pods_rejections() -> None:
    _, verbs = two_sizes({**TWO, "defaults": {"mode": Mode.SHADOW.value}})
    decision = verbs.filter_pod(pod("p", small="64Mi", large="2Gi"), [n.metadata.name for n in NODES]).decision
    assert decision.outcome is Outcome.SHADOW
    assert len(decision.passed) == 4
    assert (decision.insufficient, decision.exceeds_pool) == (0, 3)


# -- explain, /debug/state, events and metrics per size ----------------------------------------


@pytest.mark.parametrize("asks", [{"small": "64Mi"}, {"large": "2Gi"}, {"small": "64Mi", "large": "2Gi"}])
def test_explain_gives_the_filters_verdict_per_node_over_every_size(asks: dict[str, str]) -> None:
    state, verbs = two_sizes({**TWO, "defaults": {"mode": "enforce", "sampleSize": 0}})
    state.apply_pod(pod("busy", large="3Gi", node_name="both"))  # "both": 1 of 4 GiB pages left
    names = [n.metadata.name for n in NODES]
    asked = pod("p", **asks)
    explanation = explain_pod(state, asked, names)
    tables = tuple(explanation.tables.values())
    assert [t.resource_name for t in tables] == [
        r for r, k in (("hugepages-2Mi", "small"), ("hugepages-1Gi", "large")) if k in asks
    ]
    for name in names:
        said = verbs.filter_pod(asked, [name]).decision
        if len(tables) > 1:
            verdict = Fit(explanation.verdicts[name]["verdict"])
            resource = explanation.verdicts[name]["resourceName"]
        else:
            (table,) = tables
            (row,) = [r for r in table.nodes if r.node == name]
            verdict, resource = Fit(row.verdict), table.resource_name
        if verdict.admits:
            assert list(said.passed) == [name]
        else:
            reason = {**said.failed, **said.unresolvable}[name]
            assert reason == Reasons.for_resource(resource).of(verdict), name
    text = render_table(explanation)
    for table in tables:
        assert f"of {table.resource_name}" in text


async def test_debug_state_and_the_pool_metrics_name_every_size(aiohttp_client: Any) -> None:
    built = build_config(TWO, {})
    state = ClusterState(built)
    state.replace(NODES, [pod("busy", large="3Gi", node_name="both")])
    extender = Extender(built, state, Metrics(), rng=random.Random(1))
    extender.scrapes = MetricsPage(extender.metrics, share=0)  # each scrape renders: the test reads changes at once
    client = await aiohttp_client(create_app(extender))
    answer = await client.post(
        "/filter", json={"Pod": msgspec.to_builtins(pod("p", small="4Mi", large="1Gi")), "NodeNames": ["both"]}
    )
    assert (await answer.json())["NodeNames"] == ["both"]
    read = parse_state_document(await (await client.get("/debug/state")).read())
    assert read.resource_names == ("hugepages-2Mi", "hugepages-1Gi")
    assert read.holds_by_size["hugepages-2Mi"]["both"].hugepage_bytes == 4 * MIB
    assert read.holds_by_size["hugepages-1Gi"]["both"].hugepage_bytes == GIB
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert 'hugepage_extender_pool_capacity_bytes{resource="hugepages-1Gi"} 8.589934592e+09' in metrics
    assert 'hugepage_extender_pool_held_bytes{holder="pods",resource="hugepages-1Gi"} 3.221225472e+09' in metrics
    assert 'hugepage_extender_pool_capacity_bytes{resource="hugepages-2Mi"} 2.147483648e+09' in metrics
    # A relist replaces the accounts: the pools are read from the state at scrape time, not from the old ones.
    state.replace([*NODES, node("more", large="2Gi")], [])
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert 'hugepage_extender_pool_capacity_bytes{resource="hugepages-1Gi"} 1.073741824e+10' in metrics


async def test_outcomes_count_under_each_size_asked_and_rejections_under_the_size_of_their_verdict(
    aiohttp_client: Any,
) -> None:
    built = build_config({**TWO, "defaults": {"mode": "enforce", "sampleSize": 0}}, {})
    state = ClusterState(built)
    state.replace(NODES, [pod("busy", large="3Gi", node_name="both")])  # "both": 1 of 4 GiB pages left
    client = await aiohttp_client(create_app(Extender(built, state, Metrics(), rng=random.Random(1))))
    names = [n.metadata.name for n in NODES]

    async def filtered(asked: Pod) -> None:
        answer = await client.post("/filter", json={"Pod": msgspec.to_builtins(asked), "NodeNames": names})
        assert answer.status == 200

    await filtered(pod("small", small="64Mi"))  # large-only and neither: no 2 MiB pool
    await filtered(pod("both", small="64Mi", large="2Gi"))  # small-only, neither: 2 MiB first; both: 1 GiB room
    metrics = (await (await client.get("/metrics")).read()).decode()
    counted = _by_labels(metrics, "hugepage_extender_fit_rejected_nodes_total", "reason")
    # The first pod: 2 unresolvable of 2 MiB. The second: "large-only" and "neither" have no 2 MiB pool
    # (its first size no pod leaving makes room in), "small-only" no 1 GiB pool, "both" 1 GiB short.
    assert counted == {
        ("exceeds_pool", "hugepages-2Mi"): 4.0,
        ("exceeds_pool", "hugepages-1Gi"): 1.0,
        ("insufficient", "hugepages-1Gi"): 1.0,
    }
    outcomes = _by_labels(metrics, "hugepage_extender_filter_outcomes_total", "outcome")
    # The first pod fits "small-only" and "both"; the second fits none: one count per size it asks.
    assert outcomes == {
        ("fit", "hugepages-2Mi"): 1.0,
        ("no_hugepage_capacity", "hugepages-2Mi"): 1.0,
        ("no_hugepage_capacity", "hugepages-1Gi"): 1.0,
    }


def test_an_event_names_each_size_the_pod_needs() -> None:
    _, message = event_for(Outcome.NO_HUGEPAGE_CAPACITY, {"hugepages-2Mi": 64 * MIB, "hugepages-1Gi": 2 * GIB})
    assert "No node has 64Mi of hugepages-2Mi and 2Gi of hugepages-1Gi free right now" in message
    _, message = event_for(Outcome.NO_COMPATIBLE_NODE, {"hugepages-1Gi": 8 * GIB})
    assert "this pod's 8Gi of hugepages-1Gi: every node has no hugepages-1Gi pool" in message


def test_the_nodes_table_shows_each_size_of_each_node() -> None:
    state, _ = two_sizes()
    state.apply_pod(pod("busy", large="3Gi", node_name="both"))
    rows = []
    for size, book in state.books.items():
        rows += node_rows(book.accounts, {}, None, resource=size)
    table = render_node_rows(rows, with_extender=False).splitlines()
    assert table[0].split()[:3] == ["NODE", "SIZE", "POOL"]
    both = [line.split() for line in table if line.startswith("both ")]
    assert [(cells[1], cells[2], cells[3]) for cells in both] == [
        ("hugepages-2Mi", "1Gi", "0"),
        ("hugepages-1Gi", "4Gi", "3Gi"),
    ]
    # One size: the table as it always was.
    one = render_node_rows(node_rows(state.books["hugepages-2Mi"].accounts, {}, None), with_extender=False).splitlines()
    assert one[0].split()[:2] == ["NODE", "POOL"]


def test_the_sizes_benchmark_runs() -> None:
    """``python -m benchmarks.sizes`` end to end at a tiny size (its figures are printed, never asserted)."""
    rows = sizes_benchmark.run(nodes=80, repeat=2, rounds=1)
    assert [row["case"] for row in rows] == [case for case, *_ in sizes_benchmark.CASES]
    assert all(row["x one size"] > 0 and row["both sizes p50 ms"] > 0 for row in rows)


def _by_labels(metrics: str, name: str, label: str) -> dict[tuple[str, str], float]:
    """A counter's samples by (``label``, resource)."""
    return {
        (sample.labels[label], sample.labels["resource"]): sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == name
    }
