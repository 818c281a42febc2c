"""The replay's extender is server.py: the same pods through the real HTTP verbs and through
the replay's filter / prioritize / bind leave the same answers and the same in-flight holds."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from extender.core.binding import BindingArgs
from extender.core.config import DEFAULT_RESOURCE
from extender.shell.handlers import Extender
from extender.shell.metrics import Metrics
from extender.shell.server import create_app
from extender.state.cluster import ClusterState
from replay.model import GIB, Blind, InFlight, NodeGroup, Scenario, Trace, parse_variant
from replay.simulate import PodPlan, Replay, build_nodes, node_object, pod_object

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
Client = TestClient[web.Request, web.Application]

# 20 nodes with outside usage drawn from 0 to 8 GiB: some full for a 6 GiB pod, and more than
# HOLD_LIMIT admitted at K = 0 while the cluster is empty, a few once it fills.
NODES = (NodeGroup(10, 8 * GIB, 16_000, 0, 8 * GIB, "small"), NodeGroup(10, 16 * GIB, 32_000, 0, 8 * GIB, "large"))
SIZES_GIB = (2, 4, 6)


class NoBinder:
    async def bind(self, args: BindingArgs) -> None:
        return None


async def post(client: Client, verb: str, body: Any) -> Any:
    response = await client.post(f"/{verb}", data=msgspec.json.encode(body))
    assert response.status == 200
    return msgspec.json.decode(await response.read())


@pytest.mark.parametrize(
    "spec",
    [
        "enforce:fullscan:k3",  # server.py without the bind verb
        "enforce:fullscan:k3:inflight=bind",
        "enforce:fullscan:k3:inflight=bind:ns=vm",  # mode off pods held by bind only
        "enforce:fullscan:k0",  # more than HOLD_LIMIT admitted: no hold, until the pools fill
        "enforce:fullscan:k0:inflight=bind",
        "enforce:none:k2:inflight=bind",
        "shadow:inflight=bind",
    ],
)
async def test_the_replays_verbs_hold_what_the_servers_verbs_hold(aiohttp_client: ClientFactory, spec: str) -> None:
    variant = parse_variant(spec)
    replay = Replay(Scenario(NODES, (), Trace(())), variant, seed=1, blind=Blind.LEAST_CPU, tick=lambda: None)
    replay.verbs.rng = random.Random(5)
    server_state = ClusterState(replay.config, clock=lambda: 0.0)
    server_state.replace([node_object(s) for s in build_nodes(NODES, seed=1)], [])
    bind_verb = NoBinder() if variant.inflight is InFlight.BIND else None
    extender = Extender(replay.config, server_state, Metrics(), rng=random.Random(5), binder=bind_verb)
    client = await aiohttp_client(create_app(extender))

    held_at_some_point = 0
    in_flight: list[tuple[PodPlan, str]] = []
    for index in range(40):
        plan = PodPlan(f"p{index}", ("vm", "batch")[index % 2], SIZES_GIB[index % 3] * GIB, 1000, 60.0, 5.0, None)
        pod = pod_object(plan)
        demand = replay.state.demand_of(pod)
        names = replay.node_names

        decision = replay.verbs.filter(plan.uid, plan.namespace, demand, names).decision
        answer = await post(client, "filter", {"Pod": msgspec.to_builtins(pod), "NodeNames": names})
        assert decision.passed == answer["NodeNames"]
        assert replay.state.books[DEFAULT_RESOURCE].holds() == server_state.books[DEFAULT_RESOURCE].holds()
        held_at_some_point += bool(server_state.books[DEFAULT_RESOURCE].holds())
        if not decision.passed:
            continue

        # kube-scheduler scores only when more than one node is left.
        node = decision.passed[0]
        if len(decision.passed) > 1:
            scores = replay.verbs.prioritize(plan.uid, plan.namespace, demand, decision.passed)
            body = {"Pod": msgspec.to_builtins(pod), "NodeNames": decision.passed}
            assert [(s["Host"], s["Score"]) for s in await post(client, "prioritize", body)] == list(scores)
            node = max(scores, key=lambda entry: entry[1])[0]

        if variant.inflight is InFlight.BIND:
            assert replay.verbs.bind_start(plan.uid, plan.namespace, "", node).refusal is None
        if bind_verb is not None:
            binding = {"PodName": plan.uid, "PodNamespace": plan.namespace, "PodUID": plan.uid, "Node": node}
            assert await post(client, "bind", binding) == {"Error": ""}
        assert replay.state.books[DEFAULT_RESOURCE].holds() == server_state.books[DEFAULT_RESOURCE].holds()

        # Every third pick the oldest pod in flight shows up bound: both release its hold.
        in_flight.append((plan, node))
        if index % 3 == 2:
            landed, on = in_flight.pop(0)
            for state in (replay.state, server_state):
                state.apply_pod(pod_object(landed, on))
            assert replay.state.books[DEFAULT_RESOURCE].holds() == server_state.books[DEFAULT_RESOURCE].holds()
            assert replay.state.books[DEFAULT_RESOURCE].accounts == server_state.books[DEFAULT_RESOURCE].accounts

    assert held_at_some_point  # the comparisons above were not between two empty ledgers
