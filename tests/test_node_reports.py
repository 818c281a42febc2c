"""The node agents' records in the cluster state: what they change in an account, when they stop
counting, and what is ignored (never crashing, never keeping the state unready)."""

from __future__ import annotations

import random
import time
from typing import Any

import msgspec
import pytest
from prometheus_client import generate_latest

from extender.core.answer import Reasons
from extender.core.capacity import Fit, fits
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.decision import filter_nodes
from extender.core.diagnostics import parse_state_document
from extender.core.nodereport import ReportError, read_report
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.shell.server import create_app
from extender.shell.snapshot import parse_snapshot
from extender.state.cluster import ClusterState
from extender.state.explain import explain, render_table
from extender.state.reports import ReportState
from tests.conftest import Clock, MiB, make_node, make_pod

NOW = 1_800_000_000.0
RESOURCE = "hugepages-2Mi"
PAGE = 2 * MiB


def report_json(
    *, age: float = 10.0, total: int = 1024, free: int = 1024, reserved: int = 0, pods: int | None = 0,
    outside: int | None = 0, numa_free: tuple[int, ...] = (), source: str = "cgroup-v2",
) -> dict[str, Any]:  # fmt: skip
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - age))
    numa = {
        str(n): {"totalPages": total // max(1, len(numa_free)), "freePages": f, "reservedPages": None,
                 "surplusPages": 0, "podPages": None, "outsidePages": None}
        for n, f in enumerate(numa_free)
    }  # fmt: skip
    size = {"totalPages": total, "freePages": free, "reservedPages": reserved, "surplusPages": 0,
            "podPages": pods, "outsidePages": outside, "numa": numa}  # fmt: skip
    return {"observedAt": at, "source": source, "pageSizes": {RESOURCE: size}}


def raw(document: Any) -> bytes:
    return msgspec.json.encode(document)


def make_state(config: dict[str, Any] | None = None) -> tuple[ClusterState, Clock]:
    wall = Clock(NOW)
    state = ClusterState(build_config(config or {}, {}), wall_clock=wall)
    state.replace(
        [
            make_node("a", hugepages="2Gi"),  # 1024 pages
            make_node("kubelet-reserved", hugepages="1792Mi"),  # 896 of the kernel's 1024 pages allocatable
            make_node("annotated", hugepages="2Gi", reserved="100Mi"),  # 50 pages by hand
            make_node("plain"),
        ],
        [make_pod("p", hugepages="200Mi", node="a", phase="Running")],  # 100 pages requested on a
    )
    return state, wall


def apply(state: ClusterState, node: str, document: Any) -> None:
    state.apply_report(*state.report_record(node, raw(document)))


@pytest.mark.parametrize(
    ("case", "node", "report", "total", "reserved"),
    [
        ("no record: requests only", "a", None, 1024, 0),
        ("outside pages committed", "a", report_json(outside=64), 1024, 64),
        ("a kernel total below allocatable caps the pool", "a", report_json(total=900, free=900, outside=0), 900, 0),
        # pods can use min(896, 1024 - 100) = 896: the kubelet already keeps 128 out
        ("outside pages first fill what the kubelet keeps out", "kubelet-reserved", report_json(outside=100), 896, 0),
        # min(896, 1024 - 200) = 824 = 896 - 72
        ("beyond it they count", "kubelet-reserved", report_json(outside=200), 896, 72),
        ("the annotation overrides the record's outside pages", "annotated", report_json(outside=300), 1024, 50),
        ("pods' pages unknown (source none): outside not counted", "a", report_json(pods=None, outside=None), 1024, 0),
        ("a stale record counts for nothing", "a", report_json(age=4000, total=10, outside=500), 1024, 0),
    ],
)
def test_what_a_record_changes(case: str, node: str, report: Any, total: int, reserved: int) -> None:
    state, _ = make_state()
    if report is not None:
        apply(state, node, report)
    account = state.books[DEFAULT_RESOURCE].accounts[node]
    assert (account.total_pages, account.outside_pods_pages) == (total, reserved), case
    assert state.books[DEFAULT_RESOURCE].headroom[node] == (total - account.used_pages - reserved) * PAGE, case


def test_none_counts_the_nodes_whose_outside_pages_nobody_states() -> None:
    # "a" and "kubelet-reserved" have pools and neither a record nor the annotation; "annotated"
    # is stated by hand; "plain" has no pool. What HugepageNodeReportsMissing alerts on.
    state, _ = make_state()
    assert state.report_counts()[ReportState.NONE] == 2
    apply(state, "a", report_json(outside=64))
    assert state.report_counts() == {
        ReportState.FRESH: 1,
        ReportState.STALE: 0,
        ReportState.IGNORED: 0,
        ReportState.NONE: 1,
    }


def test_a_record_goes_stale_and_the_node_falls_back_visibly() -> None:
    state, wall = make_state({"defaults": {"nodeReportMaxAgeSeconds": 60}})
    apply(state, "a", report_json(age=10, outside=900))
    assert state.books[DEFAULT_RESOURCE].accounts["a"].outside_pods_pages == 900
    assert fits(state.books[DEFAULT_RESOURCE].accounts["a"], 200 * PAGE) is Fit.HELD_OUTSIDE  # 1024 - 900 = 124 < 200
    wall.now += 49  # age 59 s: still fresh
    state.expire_reports()
    assert state.books[DEFAULT_RESOURCE].accounts["a"].outside_pods_pages == 900
    wall.now += 2  # age 61 s
    state.expire_reports()
    assert state.books[DEFAULT_RESOURCE].accounts["a"].outside_pods_pages == 0
    assert state.stale_reports == 1
    assert state.report_counts()[ReportState.STALE] == 1
    assert state.books[DEFAULT_RESOURCE].report_view("a").state is ReportState.STALE
    metrics = Metrics()
    metrics.watch_state(state)
    text = generate_latest(metrics.registry).decode()
    assert 'hugepage_extender_node_reports{state="stale"} 1.0' in text
    assert "hugepage_extender_node_reports_gone_stale_total 1.0" in text
    # explain says so
    book = state.books[RESOURCE]
    result = explain(
        "default/p", PodDemand({RESOURCE: 100 * PAGE}, 0), ["a"], resource_name=RESOURCE, accounts=book.accounts,
        policy=Policy(), reports=book.report_view,
    )  # fmt: skip
    assert result.nodes[0].report == "stale"
    assert result.nodes[0].report_outside_pages == 900
    assert "counted from pod requests only" in render_table(result)
    # A new record brings it back.
    apply(state, "a", report_json(age=-51, outside=10))  # observed now (the wall clock moved 51 s)
    assert state.books[DEFAULT_RESOURCE].accounts["a"].outside_pods_pages == 10


def test_a_namespace_with_its_own_max_age_sees_its_own_accounts() -> None:
    state, _ = make_state({"namespaces": {"strict": {"nodeReportMaxAgeSeconds": 30}}})
    apply(state, "a", report_json(age=100, outside=900))  # fresh by the default (1800 s), stale at 30 s
    default_view, _, differs = state.books[DEFAULT_RESOURCE].view_for(Policy())
    assert not differs
    assert default_view["a"].outside_pods_pages == 900
    strict = build_config({"namespaces": {"strict": {"nodeReportMaxAgeSeconds": 30}}}, {}).policy_for("strict")
    accounts, headroom, differs = state.books[DEFAULT_RESOURCE].view_for(strict)
    assert differs
    assert accounts["a"].outside_pods_pages == 0
    assert headroom["a"] == (1024 - 100) * PAGE
    assert accounts["plain"] is state.books[DEFAULT_RESOURCE].accounts["plain"]


def test_held_outside_pods_is_unresolvable_with_its_own_reason() -> None:
    state, _ = make_state()
    apply(state, "a", report_json(outside=800))  # 1024 - 800 = 224 pages left after outside pages
    reasons, book = Reasons.for_resource(RESOURCE), state.books[RESOURCE]
    decision = filter_nodes(
        PodDemand({RESOURCE: 250 * PAGE}, 0), ["a", "plain"], accounts=book.accounts, headroom=book.headroom,
        policy=Policy(mode=Mode.ENFORCE, sample_size=0), reasons=reasons, rng=random.Random(0),
    )  # fmt: skip
    assert decision.unresolvable == {"a": reasons.held_outside, "plain": reasons.no_pool}
    # 200 pages fit beside the outside pages but not beside the pod's 100: preemption could help
    decision = filter_nodes(
        PodDemand({RESOURCE: 200 * PAGE}, 0), ["a"], accounts=book.accounts, headroom=book.headroom,
        policy=Policy(mode=Mode.ENFORCE, sample_size=0), reasons=reasons, rng=random.Random(0),
    )  # fmt: skip
    assert decision.failed == {"a": reasons.insufficient}


def test_numa_aligned_needs_one_numa_node_with_the_pages() -> None:
    config = {"namespaces": {"dpdk": {"mode": "enforce", "numaAligned": True, "sampleSize": 0}}}
    state, _ = make_state(config)
    # Two NUMA nodes with 150 and 300 free pages; 10 reserved globally; pods requested 100, hold 80:
    # the best node can still give 300 - 10 - (100 - 80) = 270 pages.
    apply(state, "a", report_json(free=450, reserved=10, pods=80, outside=0, numa_free=(150, 300)))
    assert state.books[DEFAULT_RESOURCE].accounts["a"].numa_free_pages == 270
    policy = build_config(config, {}).policy_for("dpdk")
    reasons, book = Reasons.for_resource(RESOURCE), state.books[RESOURCE]
    guaranteed = PodDemand({RESOURCE: 280 * PAGE}, 1000, guaranteed=True)
    decision = filter_nodes(
        guaranteed, ["a"], accounts=book.accounts, headroom=book.headroom, policy=policy, reasons=reasons,
        rng=random.Random(0),
    )  # fmt: skip
    assert decision.failed == {"a": reasons.numa}
    burstable = PodDemand({RESOURCE: 280 * PAGE}, 1000, guaranteed=False)  # not pinned to a NUMA node
    decision = filter_nodes(
        burstable, ["a"], accounts=book.accounts, headroom=book.headroom, policy=policy, reasons=reasons,
        rng=random.Random(0),
    )  # fmt: skip
    assert decision.passed == ["a"]
    fitting = PodDemand({RESOURCE: 270 * PAGE}, 1000, guaranteed=True)
    decision = filter_nodes(
        fitting, ["a"], accounts=book.accounts, headroom=book.headroom, policy=policy, reasons=reasons,
        rng=random.Random(0),
    )  # fmt: skip
    assert decision.passed == ["a"]


def test_guaranteed_qos_is_read_only_for_numa_aligned_namespaces() -> None:
    state, _ = make_state({"namespaces": {"dpdk": {"numaAligned": True}}})
    pod = make_pod("g", "dpdk", hugepages="1Gi", cpu="2", memory="1Gi")
    # make_pod sets requests only: Burstable
    assert not state.demand_of(pod).guaranteed
    limits = msgspec.to_builtins(pod)
    container = limits["spec"]["containers"][0]["resources"]
    container["limits"] = dict(container["requests"])
    guaranteed = msgspec.convert(limits, type(pod))
    assert state.demand_of(guaranteed).guaranteed
    other = msgspec.convert({**limits, "metadata": {**limits["metadata"], "namespace": "default"}}, type(pod))
    assert not state.demand_of(other).guaranteed  # not computed where not used


@pytest.mark.parametrize(
    ("case", "document", "reason"),
    [
        ("not JSON of a report", {"observedAt": 5}, "malformed"),
        ("no time zone", {**report_json(), "observedAt": "2026-11-30T12:00:00"}, "malformed"),
        ("negative pages", report_json(outside=-1), "absurd"),
        ("more outside pages than the pool", report_json(total=10, outside=11), "absurd"),
        ("a pool beyond any machine (2 PiB of 2 MiB pages)", report_json(total=1 << 30, free=0, outside=0), "absurd"),
        ("NUMA nodes freer than the pool", report_json(total=100, free=100, numa_free=(100, 100)), "absurd"),
    ],
)
def test_read_report_refuses_what_no_machine_says(case: str, document: Any, reason: str) -> None:
    with pytest.raises(ReportError) as caught:
        read_report(raw(document), RESOURCE, PAGE)
    assert caught.value.reason == reason, case


def test_a_record_without_the_page_size_says_nothing() -> None:
    document = {**report_json(), "pageSizes": {"hugepages-1Gi": report_json()["pageSizes"][RESOURCE]}}
    assert read_report(raw(document), RESOURCE, PAGE) is None


def test_ignored_records_are_counted_logged_and_harmless(caplog: pytest.LogCaptureFixture) -> None:
    state, _ = make_state()
    before = dict(state.books[DEFAULT_RESOURCE].accounts)
    apply(state, "a", report_json(outside=-5))
    state.apply_report(*state.report_record("a", b"x" * (65 * 1024)))
    state.apply_report(*state.report_record("annotated", None))
    future = report_json(age=-3600, outside=1000)
    apply(state, "kubelet-reserved", future)
    assert state.books[DEFAULT_RESOURCE].accounts == before
    assert state.ready
    assert dict(state.ignored) == {
        ("report", "absurd"): 1,
        ("report", "huge"): 1,
        ("report", "malformed"): 1,
        ("report", "future"): 1,
    }
    assert state.books[DEFAULT_RESOURCE].report_view("a").state is ReportState.IGNORED
    assert state.report_counts()[ReportState.IGNORED] == 3
    assert "agent record ignored" in caplog.text


@pytest.mark.parametrize(("value", "reason"), [("NaN", "malformed"), ("1e999999", "absurd"), ("-1Gi", "malformed"),
                                               ("lots", "malformed"), ("2Pi", "absurd")])  # fmt: skip
def test_a_bad_annotation_is_ignored_quickly_with_a_metric(value: str, reason: str) -> None:
    state, _ = make_state()
    started = time.perf_counter()
    state.apply_node(make_node("odd", hugepages="2Gi", reserved=value))
    state.replace_nodes([state.node_record(make_node("odd2", hugepages="2Gi", reserved=value))])
    assert time.perf_counter() - started < 0.5  # "1e999999" must never become a million-digit integer
    assert state.ignored[("annotation", reason)] == 2
    assert (
        state.books[DEFAULT_RESOURCE].accounts["odd2"].outside_pods_pages == 0
    )  # counted from requests, as if unannotated
    metrics = Metrics()
    metrics.watch_state(state)
    text = generate_latest(metrics.registry).decode()
    assert f'hugepage_extender_ignored_node_inputs_total{{kind="annotation",reason="{reason}"}} 2.0' in text


def test_a_snapshot_carries_records() -> None:
    document = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {RESOURCE: "2Gi", "cpu": "4"}}},
            {"kind": "HugepageNodeReport", "apiVersion": "hugepage-extender.io/v1alpha1",
             "metadata": {"name": "n"}, "report": report_json(outside=24)},
        ],
    }  # fmt: skip
    snapshot = parse_snapshot(msgspec.json.encode(document).decode())
    wall = Clock(NOW)
    state = ClusterState(build_config({}, {}), wall_clock=wall)
    state.replace(snapshot.nodes, snapshot.pods, snapshot.reports)
    assert state.books[DEFAULT_RESOURCE].accounts["n"].outside_pods_pages == 24


def test_a_record_renewed_before_its_deadline_stays_fresh_and_the_deadlines_stay_one_per_node() -> None:
    state, wall = make_state({"defaults": {"nodeReportMaxAgeSeconds": 60}})
    for _ in range(100):  # an agent writing often
        wall.now += 1
        apply(state, "a", report_json(age=NOW - wall.now, outside=7))
    assert len(state.books[DEFAULT_RESOURCE].reports._report_deadlines) == 1
    wall.now += 30  # the first record is 129 s old, the newest 30 s
    state.expire_reports()
    assert state.books[DEFAULT_RESOURCE].report_view("a").state is ReportState.FRESH
    assert state.books[DEFAULT_RESOURCE].accounts["a"].outside_pods_pages == 7
    wall.now += 31
    state.expire_reports()
    assert state.books[DEFAULT_RESOURCE].report_view("a").state is ReportState.STALE
    assert state.stale_reports == 1


async def test_the_state_endpoint_carries_the_records_as_the_namespace_judges_them(
    aiohttp_client: Any,
) -> None:
    state, _ = make_state({"namespaces": {"strict": {"nodeReportMaxAgeSeconds": 60}}})
    apply(state, "a", report_json(age=120, outside=64))
    apply(state, "kubelet-reserved", report_json(age=10, pods=None, outside=None))  # outside unknown: left out
    config = build_config({"namespaces": {"strict": {"nodeReportMaxAgeSeconds": 60}}}, {})
    client = await aiohttp_client(create_app(Extender(config, state, Metrics(), rng=random.Random(1))))
    default = parse_state_document(await (await client.get("/debug/state")).read())
    assert default.node_reports is not None
    assert set(default.node_reports) == {"a"}
    report = default.node_reports["a"]
    assert (report.outside_pods_bytes, report.stale) == (64 * PAGE, False)
    assert report.age_seconds is not None
    assert report.age_seconds == pytest.approx(120, abs=1)
    strict = parse_state_document(await (await client.get("/debug/state", params={"namespace": "strict"})).read())
    assert strict.node_reports is not None
    assert strict.node_reports["a"].stale  # 120 s is past this namespace's 60 s
