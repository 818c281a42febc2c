"""The extender over HTTP, through aiohttp's test client: both wire modes, bad input."""

import asyncio
import gc
import random
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from extender.core.answer import Reasons
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.waiting import WaitingPods
from extender.shell.filterobserver import UNSHOWN_EVENTS, FilterObserver
from extender.shell.handlers import NOT_SYNCED, Extender
from extender.shell.metrics import Metrics
from extender.shell.server import create_app
from extender.state.cluster import ClusterState
from extender.state.verbs import UNVERIFIED_HOLD_SECONDS, ExtenderVerbs
from tests.conftest import make_extender, make_node, make_pod, make_state, pod_json

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
Client = TestClient[web.Request, web.Application]

CONFIG = {
    "maxRequestBytes": 200_000,
    "defaults": {"mode": "enforce", "sampleSize": 0},
    "namespaces": {"canary": {"mode": "shadow"}, "legacy": {"mode": "off"}},
}
REASONS = Reasons.for_resource("hugepages-2Mi")
NODES = [
    make_node("roomy", hugepages="4Gi"),
    make_node("full", hugepages="2Gi"),
    make_node("small", hugepages="512Mi"),
    make_node("plain"),
    make_node("roomy-2", hugepages="4Gi"),
]
PODS = [make_pod("hog", hugepages="2Gi", node="full", phase="Running")]


def node_json(name: str) -> dict[str, Any]:
    node = next(n for n in NODES if n.metadata.name == name)
    document: dict[str, Any] = msgspec.to_builtins(node)
    document["metadata"]["labels"] = {"kubernetes.io/hostname": name}  # a field the extender never reads
    return document


def args(namespace: str = "default", hugepages: str | None = "1Gi", names: list[str] | None = None) -> dict[str, Any]:
    pod = pod_json(make_pod("web-0", namespace, hugepages=hugepages, cpu="1"))
    return {"Pod": pod, "NodeNames": names if names is not None else ["roomy", "full", "small", "plain"]}


def full_args(
    namespace: str = "default", names: tuple[str, ...] = ("roomy", "full", "small", "plain")
) -> dict[str, Any]:
    pod = pod_json(make_pod("web-0", namespace, hugepages="1Gi", cpu="1"))
    return {"Pod": pod, "Nodes": {"items": [node_json(n) for n in names]}, "NodeNames": None}


@pytest.fixture
def state() -> ClusterState:
    return make_state(CONFIG, NODES, PODS, exempt=frozenset({"hugepage-extender"}))


@pytest.fixture
def extender(state: ClusterState) -> Extender:
    return make_extender(state)


@pytest.fixture
async def client(aiohttp_client: ClientFactory, extender: Extender) -> Client:
    return await aiohttp_client(create_app(extender))


async def post(client: Client, verb: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    response = await client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
    return response.status, msgspec.json.decode(await response.read())


async def test_filter_node_names_mode(client: Client) -> None:
    status, result = await post(client, "filter", args())
    assert status == 200
    assert result["NodeNames"] == ["roomy"]
    assert result["Nodes"] is None
    # Some node passed: kube-scheduler reads the rejected nodes only when none does, so they are left out.
    assert result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"] == ""


async def test_filter_names_every_rejected_node_with_its_reason_when_none_passes(client: Client) -> None:
    status, result = await post(client, "filter", args(names=["full", "small", "plain"]))
    assert status == 200
    assert result["NodeNames"] == []
    # Every rejection is unresolvable: preemption's dry run runs the in-tree filters alone, which
    # these nodes passed (docs/design.md, "Preemption").
    assert result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == {
        "full": "Insufficient hugepages-2Mi (pool in use or held by placements in flight)",
        "small": "Pod's hugepages-2Mi request exceeds the node's whole pool",
        "plain": "Node has no hugepages-2Mi pool",  # the kubelet reports none: known empty
    }
    assert result["Error"] == ""


async def test_filter_full_nodes_mode_echoes_the_admitted_objects(client: Client) -> None:
    status, result = await post(client, "filter", full_args())
    assert status == 200
    assert result["Nodes"]["items"] == [node_json("roomy")]
    assert result["NodeNames"] is None
    assert result["FailedNodes"] == {}
    status, result = await post(client, "filter", full_args(names=("full", "small")))
    assert result["Nodes"]["items"] == []
    assert result["FailedNodes"] == {}
    assert set(result["FailedAndUnresolvableNodes"]) == {"full", "small"}


async def test_keys_in_any_casing_are_accepted(client: Client) -> None:
    body = {k.lower(): v for k, v in args().items()}
    status, result = await post(client, "filter", body)
    assert status == 200
    assert result["NodeNames"] == ["roomy"]
    body = {"POD": body["pod"], "nodeNames": body["nodenames"]}
    assert (await post(client, "filter", body))[1]["NodeNames"] == ["roomy"]


@pytest.mark.parametrize("namespace", ["canary", "legacy", "hugepage-extender"])
async def test_shadow_off_and_own_namespace_pass_every_node(client: Client, namespace: str) -> None:
    status, result = await post(client, "filter", args(namespace))
    assert status == 200
    assert result["NodeNames"] == ["roomy", "full", "small", "plain"]


async def test_shadow_counts_would_be_rejections(client: Client) -> None:
    await post(client, "filter", args("canary"))
    metrics = await (await client.get("/metrics")).text()
    rejected = 'hugepage_extender_fit_rejected_nodes_total{mode="shadow",reason="%s",resource="hugepages-2Mi"}'
    assert rejected % "insufficient" + " 1.0" in metrics
    # small (pool too small) and plain (no pool): unresolvable
    assert rejected % "exceeds_pool" + " 2.0" in metrics
    outcomes = 'hugepage_extender_filter_outcomes_total{mode="shadow",outcome="shadow",resource="hugepages-2Mi"}'
    assert outcomes + " 1.0" in metrics


async def test_no_fit_outcome_is_labelled(client: Client) -> None:
    status, result = await post(client, "filter", args(names=["full", "small"]))
    assert status == 200
    assert result["NodeNames"] == []
    metrics = await (await client.get("/metrics")).text()
    assert 'outcome="no_hugepage_capacity"' in metrics


async def test_pods_without_hugepages_get_every_candidate(client: Client) -> None:
    status, result = await post(client, "filter", args(hugepages=None))
    assert result["NodeNames"] == ["roomy", "full", "small", "plain"]
    assert status == 200


async def test_prioritize_both_modes(client: Client) -> None:
    status, result = await post(client, "prioritize", args(names=["roomy", "plain"]))
    assert status == 200
    # roomy: CPU 1/(4*16); hugepages 512 / 2048 = 0.25 -> round(7.5) = 8; plain: no pool, 0.5 -> 5
    assert result == [{"Host": "roomy", "Score": 8}, {"Host": "plain", "Score": 5}]
    status, full = await post(client, "prioritize", full_args(names=("roomy", "plain")))
    assert (status, full) == (200, result)


async def test_a_single_survivor_is_held_in_flight_once(client: Client, state: ClusterState) -> None:
    for _ in range(3):  # the scheduler may ask again for the same pod
        _status, result = await post(client, "filter", args(names=["roomy", "full"]))
        assert result["NodeNames"] == ["roomy"]
    assert state.books[DEFAULT_RESOURCE].accounts["roomy"].held_bytes == 1 << 30
    assert state.hold_count == 1


async def test_a_few_survivors_each_hold_the_need_until_the_pod_is_seen(
    aiohttp_client: ClientFactory, state: ClusterState
) -> None:
    config = build_config({"defaults": {"mode": "enforce", "sampleSize": 3}}, {})
    client = await aiohttp_client(create_app(Extender(config, state, Metrics(), rng=random.Random(1))))
    status, result = await post(client, "filter", args(names=["roomy", "roomy-2", "full"]))
    assert status == 200
    assert sorted(result["NodeNames"]) == ["roomy", "roomy-2"]
    assert state.books[DEFAULT_RESOURCE].accounts["roomy"].held_bytes == 1 << 30
    assert state.books[DEFAULT_RESOURCE].accounts["roomy-2"].held_bytes == 1 << 30
    assert state.hold_count == 1


async def test_a_retried_pod_does_not_compete_with_its_own_hold(
    aiohttp_client: ClientFactory, state: ClusterState
) -> None:
    config = build_config({"defaults": {"mode": "enforce", "sampleSize": 3}}, {})
    client = await aiohttp_client(create_app(Extender(config, state, Metrics(), rng=random.Random(1))))
    body = args(hugepages="2Gi", names=["roomy", "full"])  # roomy's 4Gi pool holds exactly two
    for _ in range(3):
        assert (await post(client, "filter", body))[1]["NodeNames"] == ["roomy"]
    assert state.books[DEFAULT_RESOURCE].accounts["roomy"].held_bytes == 2 << 30
    # and prioritize scores the pod against the pool without its own hold:
    # (1024 pages + 0 used) / 2048 = 0.5 -> 5, not (1024 + 1024) / 2048 -> 0
    _, scores = await post(client, "prioritize", args(hugepages="2Gi", names=["roomy"]))
    assert scores == [{"Host": "roomy", "Score": 5}]


async def test_not_ready_answers_an_error_never_every_node(aiohttp_client: ClientFactory, extender: Extender) -> None:
    extender.state = ClusterState(extender.config)
    client = await aiohttp_client(create_app(extender))
    status, result = await post(client, "filter", args())
    assert status == 200
    assert result["Error"] == NOT_SYNCED
    assert result["NodeNames"] is None
    assert (await client.get("/readyz")).status == 503
    assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "malformed JSON"),
        (b"[]", "ExtenderArgs must be a JSON object"),
        (b'{"NodeNames": ["a"]}', "ExtenderArgs has no Pod"),
        (b'{"Pod": {}}', "neither Nodes nor NodeNames"),
        (b'{"Pod": {}, "NodeNames": "a"}', "invalid NodeNames: Expected `array | null`, got `str`"),
        (b'{"Pod": {}, "NodeNames": [1]}', "invalid NodeNames"),
        (b'{"Pod": [], "NodeNames": []}', "invalid Pod"),
        (b'{"Pod": {"spec": {"containers": "x"}}, "NodeNames": []}', "at `Pod.spec.containers`"),
        (
            b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}',
            "missing required field `name` - at `Nodes.items[0].metadata`",
        ),
        (b'{"Pod": {}, "Nodes": {"items": 3}}', "invalid Nodes"),
        (
            b'{"Pod": {"spec": {"containers": [{"resources": {"requests": {"hugepages-2Mi": "lots"}}}]}}, '
            b'"NodeNames": ["roomy"]}',
            "invalid quantity 'lots'",
        ),
    ],
)
async def test_bad_input_is_a_clear_400_and_changes_nothing(
    client: Client, state: ClusterState, body: bytes, message: str
) -> None:
    before = dict(state.books[DEFAULT_RESOURCE].accounts)
    for verb in ("filter", "prioritize"):
        status, result = await post(client, verb, body)
        assert status == 400
        assert message in result["Error"]
    assert state.books[DEFAULT_RESOURCE].accounts == before
    status, _ = await post(client, "filter", args())
    assert status == 200  # still serving


async def test_oversized_body_is_413(client: Client) -> None:
    big = args(names=[f"node-{i:06d}" for i in range(20_000)])
    status, result = await post(client, "filter", big)
    assert status == 413
    assert "maxRequestBytes" in result["Error"]
    assert (await post(client, "filter", args()))[0] == 200


async def test_bind_is_off_unless_enabled(client: Client) -> None:
    status, _ = await post(client, "bind", {"PodName": "p", "PodNamespace": "d", "PodUID": "u", "Node": "roomy"})
    assert status == 404


async def test_metrics_count_requests_and_bad_requests(client: Client) -> None:
    await post(client, "filter", args())
    await post(client, "filter", b"{")
    metrics = await (await client.get("/metrics")).text()
    assert 'hugepage_extender_requests_total{code="200",verb="filter"} 1.0' in metrics
    assert 'hugepage_extender_requests_total{code="400",verb="filter"} 1.0' in metrics
    assert "hugepage_extender_ready 1.0" in metrics
    assert "hugepage_extender_cached_nodes 5.0" in metrics


async def test_posts_to_other_paths_are_404_and_leave_no_metric_series(client: Client) -> None:
    for path in ("no-such-verb", "x/y/z"):
        assert (await client.post(f"/{path}", data=b"{}")).status == 404
    assert (await client.post("/healthz", data=b"{}")).status == 405
    metrics = await (await client.get("/metrics")).text()
    assert "no-such-verb" not in metrics
    assert 'code="404"' not in metrics


async def test_an_idle_keep_alive_connection_keeps_neither_its_last_body_nor_its_answer(
    aiohttp_client: ClientFactory, state: ClusterState
) -> None:
    """aiohttp keeps a connection's last request and response until its next request: the body
    and a full-Nodes answer must not ride along (each idle connection would hold up to
    maxRequestBytes)."""
    padding = "x" * 150
    nodes = [{"metadata": {"name": f"n{i}", "labels": {"pad": padding}}} for i in range(8000)]
    body = msgspec.json.encode({"Pod": pod_json(make_pod("web-0", hugepages=None)), "Nodes": {"items": nodes}})
    assert len(body) > 1_000_000
    config = build_config(CONFIG | {"maxRequestBytes": 4 * len(body)}, {}, frozenset({"hugepage-extender"}))
    client = await aiohttp_client(create_app(Extender(config, state, Metrics())))

    # A plain HTTP/1.1 client on one keep-alive connection: aiohttp's test client keeps its responses.
    reader, writer = await asyncio.open_connection(client.host, client.port)
    head = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"

    async def echoed() -> int:  # every node passes: the answer echoes them
        writer.write(head.encode() + body)
        headers = (await reader.readuntil(b"\r\n\r\n")).decode().lower().split("\r\n")
        assert headers[0].startswith("http/1.1 200")
        length = next(int(h.split(":")[1]) for h in headers if h.startswith("content-length:"))
        return len(msgspec.json.decode(await reader.readexactly(length))["Nodes"]["items"])

    assert await echoed() == 8000  # warm: imports, metric children, caches
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert await echoed() == 8000
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        writer.close()
    assert kept < len(body) // 2, f"{kept} bytes still held after a {len(body)}-byte request"


class RecordedEvents:
    """The Events the extender would post (``PodEvents`` posts them for real: e2e/cluster/test_placement.py)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    def no_fit(self, pod: Any, decision: Any, needs: Any) -> None:
        self.posted.append((f"{pod.metadata.namespace}/{pod.metadata.name}", decision.outcome.value))

    def waiting_for_room(self, pod: Any) -> bool:
        self.posted.append((pod.owner, "waiting_for_room"))
        return True


async def test_a_pod_filtered_before_the_watch_showed_it_gets_its_event_once_shown(
    aiohttp_client: ClientFactory, state: ClusterState
) -> None:
    # CI saw it: kube-scheduler tried a pod no node can ever hold twice within 10 ms of its creation, both
    # before the extender's watch delivered it, then not again for minutes; the pod got no Event.
    events = RecordedEvents()
    extender = make_extender(state, events=events)
    client = await aiohttp_client(create_app(extender))
    waiting = make_pod("web-0", hugepages="1Gi", cpu="1")
    made_up = make_pod("ghost", hugepages="1Gi", cpu="1")
    for pod in (waiting, made_up):
        status, result = await post(client, "filter", {"Pod": pod_json(pod), "NodeNames": ["full", "small"]})
        assert (status, result["NodeNames"]) == (200, [])
    assert events.posted == []  # neither is a pod the watch shows yet
    extender.release_due(time.monotonic())
    assert events.posted == []
    state.apply_pod(waiting)
    extender.release_due(time.monotonic())
    extender.release_due(time.monotonic())
    assert events.posted == [("default/web-0", "no_hugepage_capacity")]


def test_kept_events_of_pods_never_shown_end_on_time_and_are_bounded(state: ClusterState) -> None:
    events = RecordedEvents()
    now = [0.0]
    observer = FilterObserver(state.config, Metrics(), WaitingPods(), events, clock=lambda: now[0])
    verbs = ExtenderVerbs(state.config, state, rng=random.Random(1))
    for i in range(UNSHOWN_EVENTS + 10):
        pod = make_pod(f"ghost-{i}", hugepages="1Gi")
        observer.observe(pod, verbs.filter_pod(pod, ["full", "small"]), 2)
    kept = observer._unshown  # the Events kept for pods not shown
    assert len(kept) == UNSHOWN_EVENTS  # the oldest went first
    assert "uid-default-ghost-0" not in kept
    shown = make_pod(f"ghost-{UNSHOWN_EVENTS + 9}", hugepages="1Gi")
    now[0] = UNVERIFIED_HOLD_SECONDS + 1  # past its time: no pod was shown under its UID
    state.apply_pod(shown)
    observer.post_shown(state.owner_of)
    assert not kept
    assert events.posted == [(f"default/{shown.metadata.name}", "no_hugepage_capacity")]
