"""Only the extender beside the scheduler that holds the leader Lease lifts gates: the decision
(``extender.core.leadership``), the Lease as the watch reads it (``extender.shell.kube.lease``) and the lift rounds
it lets through (``Extender``). On the real API server and kube-scheduler: e2e/cluster/test_leader_lease.py."""

import json
import socket
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient
from kubernetes.client import ApiClient

from extender.cli import build_parser
from extender.core.gates import GatedPods
from extender.core.leadership import LeaseRecord, LiftTurn, holder_host, lift_turn
from extender.shell.handlers import Extender
from extender.shell.kube.informer import ClusterInformer
from extender.shell.kube.lease import LeaseObject, LeaseWatch, lease_record
from extender.shell.server import create_app
from tests.conftest import make_extender, make_node, make_state
from tests.test_gates import CONFIG, RecordedLifts, gated, show, tick

NOW = 1_800_000_000.0
UUID = "6b0e1c1e-7a51-4f7b-9d55-0d1f4c9e2a10"


def held_by(holder: str, *, renewed_ago: float = 1.0, duration: int | None = 15) -> LeaseRecord:
    return LeaseRecord(holder, NOW - renewed_ago, duration)


@pytest.mark.parametrize(
    ("lease", "read", "lifts", "why"),
    [
        (None, False, False, "not read yet"),
        (None, True, True, "no leader Lease"),
        (held_by(f"sched-0_{UUID}"), True, True, "on this host (sched-0) holds"),
        (held_by(f"sched-1_{UUID}"), True, False, "the scheduler on sched-1 holds"),
        (held_by(f"sched-0_{UUID}", renewed_ago=15.0), True, False, "expired"),
        (held_by(f"sched-0_{UUID}", renewed_ago=14.9), True, True, "holds"),
        (held_by(""), True, False, "no holder"),  # released by its holder, no new one yet
        (LeaseRecord(f"sched-0_{UUID}", None, 15), True, False, "no renewTime"),
        (held_by(f"sched-0_{UUID}", duration=None), True, False, "leaseDurationSeconds"),
    ],
)
def test_the_extender_lifts_only_while_the_scheduler_on_its_host_holds_the_lease(
    lease: LeaseRecord | None, read: bool, lifts: bool, why: str
) -> None:
    turn = lift_turn(lease, read=read, hostname="sched-0", now=NOW)
    assert turn.lifts is lifts
    assert why in turn.why


def test_the_holders_hostname_is_everything_before_the_last_underscore() -> None:
    assert holder_host(f"cp-1_{UUID}") == "cp-1"
    assert holder_host(f"odd_host_{UUID}") == "odd_host"
    assert holder_host("cp-1") == "cp-1"  # not kube-scheduler's shape: the whole identity
    assert lift_turn(held_by("sched-0"), read=True, hostname="sched-0", now=NOW).lifts


def lease_json(holder: str | None, renew: str | None, duration: int | None) -> bytes:
    spec = {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration}
    body = {"metadata": {"name": "hugepage-scheduler", "namespace": "hx"}, "spec": {k: v for k, v in spec.items() if v}}
    return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **body}).encode()


def test_a_lease_as_the_api_server_sends_it() -> None:
    decoded = msgspec.json.decode(lease_json(f"sched-0_{UUID}", "2027-01-15T08:00:00.250000Z", 15), type=LeaseObject)
    assert lease_record(decoded) == LeaseRecord(f"sched-0_{UUID}", 1_800_000_000.25, 15)
    assert lease_record(msgspec.json.decode(lease_json(None, None, None), type=LeaseObject)) == LeaseRecord(
        "", None, None
    )


def test_the_watch_follows_the_lease_and_the_clock_ends_it() -> None:
    clock = [NOW]
    watch = LeaseWatch(ApiClient(), "hx", "hugepage-scheduler", hostname="sched-0", clock=lambda: clock[0])
    assert not watch.turn().lifts  # not listed yet
    watch._listed([])
    assert watch.turn().lifts  # listed, none: no scheduler elects a leader
    watch._upserted(held_by(f"sched-1_{UUID}"))
    assert not watch.turn().lifts
    watch._upserted(held_by(f"sched-0_{UUID}"))
    assert watch.turn().lifts
    clock[0] += 14.5  # no renewal seen for the Lease's duration: no longer the lifter
    assert not watch.turn().lifts
    watch._deleted(held_by(f"sched-0_{UUID}"))
    assert watch.turn().lifts
    watch._listed([held_by(f"sched-1_{UUID}", renewed_ago=0.0)])
    assert not watch.turn().lifts


def test_a_replica_that_is_not_the_lifter_lifts_nothing_and_lifts_at_once_when_it_becomes_it() -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    turn = [LiftTurn(lifts=False, why="the scheduler on sched-1 holds the leader Lease")]
    lifts, pods = RecordedLifts(), GatedPods()
    extender = make_extender(state, gated=pods, lifter=lifts, lift_turn=lambda: turn[0])
    informer = ClusterInformer(ApiClient(), state)
    informer.gated = pods
    show(informer, gated("vm"))
    tick(extender)
    tick(extender)
    assert lifts.sent == []
    assert state.books["hugepages-2Mi"].accounts["a"].held_bytes == 0  # no hold taken for a lift not sent
    assert extender.metrics.gate_lifter._value.get() == 0
    # The Lease moves here: nothing freed and nothing new since, and the pod is lifted at the next tick.
    turn[0] = LiftTurn(lifts=True, why="the scheduler on this host (sched-0) holds the leader Lease")
    tick(extender)
    assert lifts.sent == ["vm"]
    assert extender.metrics.gate_lifter._value.get() == 1


async def test_debug_state_says_whether_this_replica_lifts(aiohttp_client: Any) -> None:
    state = make_state(CONFIG, [make_node("a", hugepages="1Gi")])
    state.ready = True
    not_here = LiftTurn(lifts=False, why="the scheduler on sched-1 holds the leader Lease")
    lifting = make_extender(state, gated=GatedPods(), lifter=RecordedLifts(), lift_turn=lambda: not_here)
    assert await gate_lifter(aiohttp_client, lifting) == {"lifts": False, "why": not_here.why}
    assert await gate_lifter(aiohttp_client, make_extender(state)) is None  # lifts no gates (--no-lift-gates)


async def gate_lifter(aiohttp_client: Any, extender: Extender) -> Any:
    client: TestClient[Any, Any] = await aiohttp_client(create_app(extender))
    response = await client.get("/debug/state")
    assert response.status == 200
    return (await response.json())["gateLifter"]


def test_the_flags() -> None:
    parse = build_parser().parse_args
    args = parse(["serve", "--example"])
    assert args.leader_lease is None
    assert args.hostname == socket.gethostname()
    args = parse(["serve", "--example", "--leader-lease", "kube-system/kube-scheduler", "--hostname", "cp-1"])
    assert (args.leader_lease, args.hostname) == (("kube-system", "kube-scheduler"), "cp-1")
    for bad in ("kube-scheduler", "kube-system/", "/kube-scheduler", "a/b/c"):
        with pytest.raises(SystemExit):
            parse(["serve", "--example", "--leader-lease", bad])
