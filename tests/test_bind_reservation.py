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
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.binding import BindingArgs
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.holds import HOLD_LIMIT
from extender.core.nodereport import PoolReport
from extender.core.objects import Node, Pod
from extender.core.podrequest import PodDemand
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.shell.server import create_app
from extender.state.cluster import ClusterState
from extender.state.verbs import BindResult, ExtenderVerbs
from tests.conftest import Clock, GiB, MiB, examples, make_node, make_pod, pod_json

EVERY_NODE = {"defaults": {"mode": "enforce", "sampleSize": 0}}
HALF = PodDemand({DEFAULT_RESOURCE: 512 * MiB}, cpu_millis=100)
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
    assert state.books[DEFAULT_RESOURCE].accounts[a].free_pages == 0  # never over: 1 running + 1 held of 2 slots
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
    assert state.books[DEFAULT_RESOURCE].accounts["a"].free_pages == 0
    start = v.bind_start(uid, "team", "p", "a")
    assert (start.refusal, start.held) == (None, True)
    assert {uid: hold.nodes for uid, hold in state.books[DEFAULT_RESOURCE].holds().items()} == {uid: ("a",)}


def test_a_refused_bind_releases_the_pods_holds() -> None:
    state = loaded({"defaults": {"mode": "enforce", "sampleSize": 2}}, [make_node(n, hugepages="1Gi") for n in "ab"])
    v = verbs(state)
    uid = shown(state, "p", hugepages="512Mi")
    assert v.filter(uid, "team", HALF, ["a", "b"], name="p").held
    # A pod bound to "a" by someone else (another scheduler) since: "a" can no longer hold p.
    state.apply_pod(make_pod("vm", "other", hugepages="768Mi", node="a", phase="Running"))
    assert v.bind_start(uid, "team", "p", "a").result is BindResult.NO_ROOM
    assert uid not in state.books[DEFAULT_RESOURCE].holds()  # its bind is over; the retry filters afresh


def test_numa_where_the_policy_pins_the_pod() -> None:
    # The node's pool holds both pods; each NUMA node holds one of them.
    clock = Clock()
    document = {"defaults": {"mode": "enforce", "sampleSize": 0, "numaAligned": True}}
    state = loaded(document, [make_node(name, hugepages="2Gi") for name in NAMES], clock)
    for name in NAMES:
        state.apply_report(name, {DEFAULT_RESOURCE: (PoolReport(clock.now, "test", 1024, 0, 0, 0, (256, 256)), None)})
    v = verbs(state)
    pinned = PodDemand({DEFAULT_RESOURCE: 512 * MiB}, 100, guaranteed=True)
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
    both = PodDemand({"hugepages-2Mi": 512 * MiB, "hugepages-1Gi": GiB}, 100)
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
    assert state.books["hugepages-1Gi"].accounts["n00"].free_pages == 0


def test_a_bind_for_a_pod_the_watch_has_not_shown_holds_against_every_pod_until_its_binding_fails() -> None:
    # The scheduler may bind a pod a few milliseconds before this extender's watch shows it. Its filter's
    # holds stand only against other unshown pods (made-up pods never keep a real pod off a pool), but
    # its bind's hold is for a Binding being made: it stands against a shown pod too, until the Binding
    # fails (a made-up pod's fails at once) or the watch shows the pod bound.
    state = loaded(EVERY_NODE, [make_node(name, hugepages="512Mi") for name in NAMES])
    v = verbs(state)
    early = make_pod("early", "team", hugepages="512Mi").metadata.uid  # not shown by the watch
    assert len(v.filter(early, "team", HALF, NAMES, name="early").decision.passed) == len(NAMES)
    shown_uid = shown(state, "shown", hugepages="512Mi")
    assert len(v.filter(shown_uid, "team", HALF, NAMES, name="shown").decision.passed) == len(NAMES)
    assert v.bind_start(early, "team", "early", "n00").held
    assert v.bind_start(shown_uid, "team", "shown", "n00").result is BindResult.NO_ROOM
    v.bind_failed(early)  # the API refused the Binding: a made-up pod, or its UID no longer the pod's
    assert len(v.filter(shown_uid, "team", HALF, NAMES, name="shown").decision.passed) == len(NAMES)
    assert v.bind_start(shown_uid, "team", "shown", "n00").result is BindResult.BOUND


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


# --------------------------------------------------------------------------- any interleaving: no pool over
#
# The real ClusterState and ExtenderVerbs, driven as the scheduler, the API server and the watch drive
# them, in any order: pods created and shown by the watch (or not yet), filtered, bound (the bind's
# check and hold, then its API call succeeding or failing while other calls run), shown bound or
# deleted, pools growing, and time passing (holds expiring). The truth is the API server's: the pods
# whose Binding it accepted, with needs written out here, not read through the extender. Pools only
# grow: a pool shrunk under its pods is over by the node's doing, not a bind's.

POD_NODES = [f"n{i:02d}" for i in range(HOLD_LIMIT + 2)]
SLOT = 512 * MiB
SMALL, LARGE = "hugepages-2Mi", "hugepages-1Gi"
HOLD_TIMEOUT = 30.0
# namespace -> policy; every one enforcing, with and without holds at filter time.
NAMESPACES = {
    "hp": {"mode": "enforce", "sampleSize": 0, "holdTimeoutSeconds": HOLD_TIMEOUT},
    "vm": {"mode": "enforce", "sampleSize": 0, "needFromMemory": True, "holdTimeoutSeconds": HOLD_TIMEOUT},
    "few": {"mode": "enforce", "sampleSize": 2, "holdTimeoutSeconds": HOLD_TIMEOUT},
}
# Pod i: its namespace, its requests, its need per size (bytes), as the API server's truth counts it.
ONE_SIZE_PODS = [
    ("hp", {SMALL: "512Mi"}, {SMALL: SLOT}),
    ("vm", {"memory": "512Mi"}, {SMALL: SLOT}),
    ("few", {SMALL: "512Mi"}, {SMALL: SLOT}),
    ("hp", {SMALL: "1Gi"}, {SMALL: 2 * SLOT}),
    ("vm", {"memory": "1Gi"}, {SMALL: 2 * SLOT}),
    ("hp", {SMALL: "512Mi"}, {SMALL: SLOT}),
]
TWO_SIZE_PODS = [
    ("hp", {SMALL: "512Mi"}, {SMALL: SLOT}),
    ("vm", {"memory": "512Mi"}, {SMALL: SLOT}),
    ("few", {LARGE: "1Gi"}, {LARGE: GiB}),
    ("hp", {LARGE: "1Gi"}, {LARGE: GiB}),
    ("hp", {SMALL: "1Gi", LARGE: "1Gi"}, {SMALL: 2 * SLOT, LARGE: GiB}),
    ("vm", {"memory": "512Mi", LARGE: "1Gi"}, {LARGE: GiB}),  # asks hugepages: its memory is not counted
]
# (kind, which of the pods it can happen to, a detail): the scheduler's calls weigh most.
KINDS = ["filter"] * 3 + ["bind"] * 3 + ["show", "bound", "bound", "watch", "delete", "grow", "time"]
interleavings = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 5), st.integers(0, 3)), min_size=4, max_size=60
)
SECONDS = (0.5, 3.0, 6.0, 31.0)  # past a bind's API call, an unshown pod's window, a hold's timeout


class Cluster:
    """The API server's truth beside the extender's state and verbs."""

    def __init__(self, pods: list[tuple[str, dict[str, str], dict[str, int]]], sizes: tuple[str, ...]) -> None:
        self.clock = Clock()
        self.sizes = sizes
        self.pods = pods
        self.pools = {node: {SMALL: SLOT, LARGE: GiB} for node in POD_NODES}  # one pod each; grown, more
        document = {"resourceNames": list(sizes), "namespaces": NAMESPACES}
        self.state = ClusterState(build_config(document, {}), clock=self.clock, wall_clock=self.clock)
        self.state.replace([self.node(name) for name in POD_NODES], [])
        self.verbs = ExtenderVerbs(self.state.config, self.state, rng=random.Random(0), verify_holds=True)
        self.deleted: set[int] = set()
        self.passed: dict[int, list[str]] = {}  # the last filter's admitted nodes
        self.in_flight: dict[int, tuple[str, float]] = {}  # a bind's API call under way: node, when it began
        self.bound: dict[int, tuple[str, float]] = {}  # Bindings the API accepted: node, when
        self.shown_bound: set[int] = set()

    def node(self, name: str) -> Node:
        allocatable = {"cpu": "64", "memory": "256Gi", **{size: str(self.pools[name][size]) for size in self.sizes}}
        return msgspec.convert({"metadata": {"name": name}, "status": {"allocatable": allocatable}}, Node)

    def pod(self, index: int, node: str | None = None) -> Pod:
        namespace, requests, _ = self.pods[index]
        document: dict[str, Any] = {
            "metadata": {"name": f"p{index}", "namespace": namespace, "uid": f"uid-{index}"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "100m", **requests}}}]},
            "status": {"phase": "Running" if node else "Pending"},
        }
        if node:
            document["spec"]["nodeName"] = node
        return msgspec.convert(document, Pod)

    def pending(self, index: int) -> bool:
        """Not deleted, not bound, no bind under way: what the scheduler may filter and bind (every pod
        exists from the start; the watch shows it when told to)."""
        return not (index in self.deleted or index in self.bound or index in self.in_flight)

    def apply(self, change: tuple[Any, ...]) -> None:
        """One change; ``which`` picks among the pods it can happen to (so most changes happen)."""
        kind, which, detail = change
        if kind == "grow":
            self.grow(POD_NODES[which % 2], self.sizes[detail % len(self.sizes)])
        elif kind == "time":
            self.advance(SECONDS[detail])
        elif pods := self.eligible(kind):
            getattr(self, f"on_{kind}")(pods[which % len(pods)], detail)

    def eligible(self, kind: str) -> list[int]:
        """The pods a change of ``kind`` can happen to now."""
        pending = [i for i in range(len(self.pods)) if self.pending(i)]
        return {
            "show": pending,
            "filter": pending,
            "bind": [i for i in pending if self.passed.get(i)],
            "bound": list(self.in_flight),
            "watch": [i for i in self.bound if i not in self.shown_bound],
            "delete": [i for i in range(len(self.pods)) if i not in self.in_flight and i not in self.deleted],
        }[kind]

    def on_show(self, index: int, _: int) -> None:
        self.state.apply_pod(self.pod(index))  # the watch shows it waiting

    def on_filter(self, index: int, _: int) -> None:
        self.passed[index] = list(self.verbs.filter_pod(self.pod(index), POD_NODES).decision.passed)

    def on_bind(self, index: int, detail: int) -> None:
        passed = self.passed[index]
        node = passed[detail % min(2, len(passed))]  # one of the first nodes admitted: contended
        if self.verbs.bind_start(f"uid-{index}", self.pods[index][0], f"p{index}", node).refusal is None:
            self.in_flight[index] = (node, self.clock.now)

    def on_bound(self, index: int, detail: int) -> None:
        self.finish_bind(index, accepted=detail > 0)

    def on_watch(self, index: int, _: int) -> None:
        self.show_bound(index)

    def on_delete(self, index: int, _: int) -> None:
        self.deleted.add(index)
        self.bound.pop(index, None)
        self.state.remove_pod(f"uid-{index}")

    def grow(self, node: str, size: str) -> None:
        self.pools[node][size] += {SMALL: SLOT, LARGE: GiB}[size]
        self.state.apply_node(self.node(node))

    def finish_bind(self, index: int, *, accepted: bool) -> None:
        node, _ = self.in_flight.pop(index)
        if accepted:
            self.bound[index] = (node, self.clock.now)
        else:
            self.verbs.bind_failed(f"uid-{index}")

    def show_bound(self, index: int) -> None:
        self.shown_bound.add(index)
        self.state.apply_pod(self.pod(index, self.bound[index][0]))

    def advance(self, seconds: float) -> None:
        """Time passes. A bind's API call ends within its timeout (1.5 s), and the watch shows a Binding
        long before its hold's timeout (else the watch makes no progress and the extender is unready)."""
        later = self.clock.now + seconds
        for index, (_, began) in list(self.in_flight.items()):
            if began + 1.5 <= later:
                self.finish_bind(index, accepted=True)
        for index, (_, at) in list(self.bound.items()):
            if index not in self.shown_bound and at + HOLD_TIMEOUT / 2 <= later:
                self.show_bound(index)
        self.clock.now = later
        self.verbs.expire()

    def over(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(node, size) -> (bytes the API's bound pods and Bindings under way hold, the pool): those over."""
        used: dict[tuple[str, str], int] = {}
        for index, (node, _) in [*self.bound.items(), *self.in_flight.items()]:
            for size, need in self.pods[index][2].items():
                used[node, size] = used.get((node, size), 0) + need
        return {
            key: (held, self.pools[key[0]][key[1]]) for key, held in used.items() if held > self.pools[key[0]][key[1]]
        }


@pytest.mark.parametrize("sizes", [(SMALL,), (SMALL, LARGE)], ids=["one-size", "two-sizes"])
@settings(max_examples=examples(400), deadline=None)
@given(changes=interleavings)
def test_no_interleaving_of_filters_binds_watch_events_and_expiry_over_commits_a_pool(
    sizes: tuple[str, ...], changes: list[tuple[Any, ...]]
) -> None:
    cluster = Cluster(ONE_SIZE_PODS if len(sizes) == 1 else TWO_SIZE_PODS, sizes)
    for change in changes:
        cluster.apply(change)
        assert not cluster.over(), (change, cluster.over())
