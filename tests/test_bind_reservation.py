"""A bind is a reservation (issue 29): at bind time the node must still hold the pod given every
account and hold but the pod's own, judged as the filter judges; else the bind is refused and the
scheduler retries the pod. Filters that admit without holding (``sampleSize: 0``) let two pods be
admitted to the same last room: only the first bind takes it."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from extender.binding import BindingArgs
from extender.cluster import ClusterState
from extender.config import build_config
from extender.holds import HOLD_LIMIT
from extender.metrics import Metrics
from extender.nodereport import PoolReport
from extender.objects import Node
from extender.podrequest import PodDemand
from extender.server import Extender, create_app
from extender.verbs import BindResult, ExtenderVerbs
from tests.conftest import Clock, GiB, MiB, make_node, make_pod, pod_json

EVERY_NODE = {"defaults": {"mode": "enforce", "sampleSize": 0}}
HALF = PodDemand(hugepage_bytes=512 * MiB, cpu_millis=100)
# More nodes with room than a filter's hold covers (HOLD_LIMIT): every one admitted, none held.
NAMES = [f"n{i:02d}" for i in range(HOLD_LIMIT + 1)]


def loaded(document: dict[str, Any], nodes: list[Any], clock: Clock | None = None) -> ClusterState:
    clock = clock or Clock()
    state = ClusterState(build_config(document, {}), clock=clock, wall_clock=clock)
    state.replace(nodes, [])
    return state


def verbs(state: ClusterState) -> ExtenderVerbs:
    return ExtenderVerbs(state.config, state, rng=random.Random(1), verify_holds=True)


def shown(state: ClusterState, name: str, **requests: Any) -> str:
    """A pod the watch shows waiting; its UID."""
    pod = make_pod(name, "team", **requests)
    state.apply_pod(pod)
    return pod.metadata.uid


def test_two_pods_admitted_to_the_last_room_only_the_first_bind_takes_it() -> None:
    state = loaded(EVERY_NODE, [make_node(name, hugepages="1Gi") for name in NAMES])
    v = verbs(state)
    a, b = NAMES[:2]
    state.apply_pod(make_pod("running", "team", hugepages="512Mi", node=a, phase="Running"))
    first, second = (shown(state, name, hugepages="512Mi") for name in ("first", "second"))
    # Both filters admit every node and hold nothing (more than a hold covers: the bind names one).
    for uid, name in ((first, "first"), (second, "second")):
        result = v.filter(uid, "team", HALF, NAMES, name=name)
        assert sorted(result.decision.passed) == NAMES
        assert not result.held
    assert v.bind_start(first, "team", "first", a).held  # a's last 512Mi, held until the pod shows bound
    late = v.bind_start(second, "team", "second", a)
    assert late.result is BindResult.NO_ROOM
    assert late.refusal is not None
    assert "Insufficient hugepages-2Mi" in late.refusal
    assert "second" not in late.refusal  # nothing from the request
    assert not late.held
    assert state.accounts[a].free_pages == 0  # never over: 1 running + 1 held of 2 slots
    # Retried (a new filter), it goes where there is room.
    assert a not in v.filter(second, "team", HALF, NAMES, name="second").decision.passed
    assert v.bind_start(second, "team", "second", b).result is BindResult.BOUND


def test_the_pods_own_hold_never_refuses_its_bind() -> None:
    # Best-of-K holds the pod's need on each node admitted: the node it binds to counts that hold,
    # which is the pod's own, so a pool the pod alone fills is still its to take.
    state = loaded({"defaults": {"mode": "enforce", "sampleSize": 2}}, [make_node(n, hugepages="512Mi") for n in "ab"])
    v = verbs(state)
    uid = shown(state, "p", hugepages="512Mi")
    assert v.filter(uid, "team", HALF, ["a", "b"], name="p").held
    assert state.accounts["a"].free_pages == 0
    start = v.bind_start(uid, "team", "p", "a")
    assert (start.refusal, start.held) == (None, True)
    assert {uid: hold.nodes for uid, hold in state.holds().items()} == {uid: ("a",)}


def test_a_refused_bind_releases_the_pods_holds() -> None:
    state = loaded({"defaults": {"mode": "enforce", "sampleSize": 2}}, [make_node(n, hugepages="1Gi") for n in "ab"])
    v = verbs(state)
    uid = shown(state, "p", hugepages="512Mi")
    assert v.filter(uid, "team", HALF, ["a", "b"], name="p").held
    # A pod bound to "a" by someone else (another scheduler) since: "a" can no longer hold p.
    state.apply_pod(make_pod("vm", "other", hugepages="768Mi", node="a", phase="Running"))
    assert v.bind_start(uid, "team", "p", "a").result is BindResult.NO_ROOM
    assert uid not in state.holds()  # its bind is over; the retry filters afresh


def test_numa_where_the_policy_pins_the_pod() -> None:
    # The node's pool holds both pods; each NUMA node holds one of them.
    clock = Clock()
    document = {"defaults": {"mode": "enforce", "sampleSize": 0, "numaAligned": True}}
    state = loaded(document, [make_node(name, hugepages="2Gi") for name in NAMES], clock)
    for name in NAMES:
        state.apply_report(name, PoolReport(clock.now, "test", 1024, 0, 0, 0, (256, 256)))
    v = verbs(state)
    pinned = PodDemand(512 * MiB, 100, guaranteed=True)
    first, second, loose = (shown(state, name, hugepages="512Mi") for name in ("first", "second", "loose"))
    for uid, name, demand in ((first, "first", pinned), (second, "second", pinned), (loose, "loose", HALF)):
        result = v.filter(uid, "team", demand, NAMES, name=name)
        assert (len(result.decision.passed), result.held) == (len(NAMES), False)
    assert v.bind_start(first, "team", "first", "n00").held
    refused = v.bind_start(second, "team", "second", "n00")
    assert refused.result is BindResult.NO_ROOM
    assert refused.refusal is not None
    assert "NUMA" in refused.refusal
    # A pod the policy does not pin (not Guaranteed) is judged on the whole pool, which has room.
    assert v.bind_start(loose, "team", "loose", "n00").result is BindResult.BOUND


def test_every_size_the_pod_asks() -> None:
    document = {"resourceNames": ["hugepages-2Mi", "hugepages-1Gi"], "defaults": {"mode": "enforce", "sampleSize": 0}}
    allocatable = {"cpu": "16", "hugepages-2Mi": "4Gi", "hugepages-1Gi": "1Gi"}
    nodes = [msgspec.convert({"metadata": {"name": n}, "status": {"allocatable": allocatable}}, Node) for n in NAMES]
    state = loaded(document, nodes)
    v = verbs(state)
    both = PodDemand(512 * MiB, 100, more_bytes=(1 * GiB,))
    uids = [shown(state, name) for name in ("first", "second")]
    for uid, name in zip(uids, ("first", "second"), strict=True):
        result = v.filter(uid, "team", both, NAMES, name=name)
        assert (len(result.decision.passed), result.held) == (len(NAMES), False)
    assert v.bind_start(uids[0], "team", "first", "n00").held
    refused = v.bind_start(uids[1], "team", "second", "n00")
    # The 2Mi pool has room for 7 more; the 1Gi pool none.
    assert refused.result is BindResult.NO_ROOM
    assert refused.refusal is not None
    assert "hugepages-1Gi" in refused.refusal
    assert state.sizes[1].accounts["n00"].free_pages == 0


@pytest.mark.parametrize("mode", ["shadow", "off"])
def test_shadow_and_off_bind_as_they_filter(mode: str) -> None:
    # Only enforce refuses: shadow changes no decision, off is not the extender's business.
    state = loaded({"defaults": {"mode": mode}}, [make_node("a", hugepages="512Mi")])
    v = verbs(state)
    uids = [shown(state, name, hugepages="512Mi") for name in ("first", "second")]
    for uid, name in zip(uids, ("first", "second"), strict=True):
        v.filter(uid, "team", HALF, ["a"], name=name)
        assert v.bind_start(uid, "team", name, "a").refusal is None


class SlowBinder:
    """Binds nothing; the first call waits until released, as a Binding waits on the API server."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[BindingArgs] = []

    async def bind(self, args: BindingArgs) -> None:
        self.started.append(args)
        if len(self.started) == 1:
            await self.release.wait()


async def test_a_bind_under_way_holds_its_room_against_a_concurrent_bind(aiohttp_client: Any) -> None:
    """Over HTTP, the race of the issue: the first bind's API call is still under way (its handler
    awaits) when the second bind for the same last room arrives. It is refused with the reason,
    counted as ``no_room``, and its Binding never made."""
    state = loaded(EVERY_NODE, [make_node(name, hugepages="512Mi") for name in NAMES])
    binder = SlowBinder()
    metrics = Metrics()
    extender = Extender(state.config, state, metrics, rng=random.Random(1), binder=binder, verify_holds=True)
    client: TestClient[Any, Any] = await aiohttp_client(create_app(extender))
    pods = [make_pod(name, "team", hugepages="512Mi", cpu="100m") for name in ("first", "second")]
    for pod in pods:
        state.apply_pod(pod)
        response = await client.post("/filter", data=msgspec.json.encode({"Pod": pod_json(pod), "NodeNames": NAMES}))
        assert msgspec.json.decode(await response.read())["NodeNames"] == NAMES

    def binding(name: str) -> bytes:
        body = {"PodName": name, "PodNamespace": "team", "PodUID": f"uid-team-{name}", "Node": "n00"}
        return msgspec.json.encode(body)

    first = asyncio.create_task(client.post("/bind", data=binding("first")))
    while not binder.started:
        await asyncio.sleep(0.001)
    second = await client.post("/bind", data=binding("second"))
    assert "Insufficient hugepages-2Mi" in msgspec.json.decode(await second.read())["Error"]
    binder.release.set()
    assert msgspec.json.decode(await (await first).read()) == {"Error": ""}
    assert [args.pod_name for args in binder.started] == ["first"]
    counted = {result: metrics.binds.labels(result)._value.get() for result in ("bound", "no_room", "refused")}
    assert counted == {"bound": 1, "no_room": 1, "refused": 0}
