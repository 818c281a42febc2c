"""Who may hold pages and who may bind: a caller that reaches the port writes any UID,
namespace and name it likes (docs/reliability.md, threat model)."""

from __future__ import annotations

import random

import pytest

from extender.core.config import DEFAULT_RESOURCE, build_config, holds_need_bind
from extender.core.podrequest import PodDemand
from extender.state.cluster import ClusterState
from extender.state.verbs import UNVERIFIED_HOLD_SECONDS, ExtenderVerbs
from tests.conftest import Clock, GiB, make_node, make_pod, make_state

NEED = PodDemand({DEFAULT_RESOURCE: 1 * GiB}, cpu_millis=100)
NODES = [f"n{i}" for i in range(6)]
CONFIG = {"defaults": {"mode": "enforce", "sampleSize": 6, "holdTimeoutSeconds": 30}}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    return make_state(CONFIG, [make_node(n, hugepages="1Gi") for n in NODES], clock=clock)


def verbs(state: ClusterState) -> ExtenderVerbs:
    return ExtenderVerbs(build_config(CONFIG, {}), state, rng=random.Random(1), verify_holds=True)


def waiting(state: ClusterState, name: str, namespace: str = "team") -> str:
    """A real pod, as the watch shows it: waiting for a node."""
    pod = make_pod(name, namespace, hugepages="1Gi")
    state.apply_pod(pod)
    return pod.metadata.uid


def test_made_up_pods_never_keep_a_real_pod_off_a_pool(state: ClusterState, clock: Clock) -> None:
    # Five filter calls for pods no watch ever shows held every 1Gi pool (the attack).
    v = verbs(state)
    fakes_held = [v.filter(f"fake-{i}", "team", NEED, NODES, name=f"fake-{i}").held for i in range(5)]
    assert fakes_held[0]  # on all six pools (K = 6): against other pods the watch has not shown
    assert not v.filter("unshown", "team", NEED, NODES, name="unshown").decision.passed
    real = waiting(state, "real")
    filtered = v.filter(real, "team", NEED, NODES, name="real")
    decision, held = filtered.decision, filtered.held
    assert decision.passed  # a pod the watch shows does not see the made-up holds
    assert held
    # Renewed with fresh UIDs, again and again: never in a real pod's way, and bounded in number.
    for round_ in range(200):
        v.filter(f"fresh-{round_}", "team", NEED, NODES, name=f"fresh-{round_}")
    assert len(v._unverified_uids) <= 64
    assert v.bind_start(real, "team", "real", "n0").held  # the real pod's hold narrows to its node
    other = waiting(state, "other")
    assert v.filter(other, "team", NEED, NODES[1:], name="other").decision.passed
    # Past the window the made-up holds are gone, and their UIDs hold nothing again.
    clock.now += UNVERIFIED_HOLD_SECONDS + 0.1
    v.filter("x", "team", PodDemand({DEFAULT_RESOURCE: 0}, 0), NODES, name="x")
    assert set(state.books[DEFAULT_RESOURCE].holds()) == {real, other}
    assert v.filter("fake-0", "team", NEED, NODES, name="fake-0").held is False


def test_a_real_pod_keeps_its_hold_past_the_verification_window(state: ClusterState, clock: Clock) -> None:
    v = verbs(state)
    real = waiting(state, "real")
    assert v.filter(real, "team", NEED, NODES[:1], name="real").held
    clock.now += UNVERIFIED_HOLD_SECONDS + 1
    other = waiting(state, "other")
    assert not v.filter(other, "team", NEED, NODES[:1], name="other").decision.passed  # n0 still held for "real"


def test_a_pod_the_watch_has_not_shown_yet_holds_until_it_is_shown(state: ClusterState, clock: Clock) -> None:
    # The scheduler may filter a pod before this extender's watch shows it.
    v = verbs(state)
    assert v.filter("early", "team", NEED, NODES[:1], name="early").held
    clock.now += 1
    state.apply_pod(make_pod("early", "team", uid="early", hugepages="1Gi"))
    clock.now += UNVERIFIED_HOLD_SECONDS
    v.filter("x", "team", PodDemand({DEFAULT_RESOURCE: 0}, 0), NODES, name="x")  # any call drops what expired
    assert "early" in state.books[DEFAULT_RESOURCE].holds()


def test_another_namespace_cannot_cancel_or_take_over_a_pods_hold(state: ClusterState) -> None:
    v = verbs(state)
    real = waiting(state, "real")
    assert v.filter(real, "team", NEED, NODES[:1], name="real").held
    # The same UID from elsewhere: decided (the answer is harmless) but the hold stays the real pod's.
    held = v.filter(real, "attacker", PodDemand({DEFAULT_RESOURCE: 2 * GiB}, 0), NODES[1:2], name="real").held
    assert not held
    assert state.books[DEFAULT_RESOURCE].holds()[real].nodes == ("n0",)
    assert v.refused_holds == 1


def test_without_a_watch_a_uid_stays_with_the_pod_that_first_held_it(state: ClusterState) -> None:
    v = ExtenderVerbs(build_config(CONFIG, {}), state, rng=random.Random(1))  # snapshot mode: nothing to verify
    assert v.filter("u1", "team", NEED, NODES[:1], name="a").held
    assert not v.filter("u1", "other", NEED, NODES[1:2], name="a").held
    assert state.books[DEFAULT_RESOURCE].holds()["u1"].nodes == ("n0",)


@pytest.mark.parametrize(
    ("uid", "namespace", "name", "node", "refusal"),
    [
        ("uid-team-p", "team", "p", "n0", None),
        ("never-filtered", "team", "p", "n0", "has not filtered a pod with this UID"),
        ("uid-team-p", "kube-system", "p", "n0", "namespace and name differ"),
        ("uid-team-p", "team", "coredns", "n0", "namespace and name differ"),
        ("uid-team-p", "team", "p", "n5", "not one this extender's filter admitted"),
        ("uid-team-p", "team", "p", "master-0", "not one this extender's filter admitted"),
    ],
)
def test_bind_only_a_pod_filtered_to_a_node_admitted(  # noqa: PLR0917 (the table's columns)
    state: ClusterState, uid: str, namespace: str, name: str, node: str, refusal: str | None
) -> None:
    v = verbs(state)
    waiting(state, "p")
    v.filter("uid-team-p", "team", NEED, NODES[:2], name="p")
    found = v.bind_refusal(uid, namespace, name, node)
    if refusal is None:
        assert found is None
    else:
        assert found is not None
        assert refusal in found


def test_bind_authority_covers_pods_without_hugepages_too(state: ClusterState) -> None:
    v = verbs(state)
    v.filter("plain", "team", PodDemand({DEFAULT_RESOURCE: 0}, 100), NODES, name="web")
    assert v.bind_refusal("plain", "team", "web", "n3") is None
    assert v.bind_refusal("plain", "team", "web", "elsewhere") is not None


def test_remembered_pods_are_bounded_in_count_and_in_names() -> None:
    state = ClusterState(build_config(CONFIG, {}))
    state.replace([make_node("node-7", hugepages="1Gi")], [])
    v = ExtenderVerbs(build_config(CONFIG, {}), state)
    names = [f"node-{i}" for i in range(5_000)]
    for i in range(12_000):
        v.filter(
            f"u{i}", "team", PodDemand({DEFAULT_RESOURCE: 0}, 0), list(names), name=f"p{i}"
        )  # a new list each call
    assert len(v._recent) == 10_000
    assert all(f.admitted is None for f in v._recent.values())  # no list of 5,000 names kept
    # Every candidate admitted: a node this extender knows may be bound to.
    assert v.bind_refusal("u11999", "team", "p11999", "node-7") is None
    assert v.bind_refusal("u11999", "team", "p11999", "node-9") is not None


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"defaults": {"mode": "enforce", "sampleSize": 0}}, "defaults.sampleSize: 0"),
        ({"defaults": {"mode": "enforce", "sampleSize": 17}}, "defaults.sampleSize: 17"),
        ({"namespaces": {"vms": {"mode": "enforce", "sampleSize": 0}}}, "namespaces.vms.sampleSize: 0"),
        ({"defaults": {"mode": "enforce", "sampleSize": 16}}, None),
        ({"defaults": {"mode": "shadow", "sampleSize": 0}}, None),  # shadow never rejects: nothing to hold
        ({"defaults": {"mode": "off", "sampleSize": 0}}, None),
        ({}, None),
    ],
)
def test_configs_that_would_over_commit_without_bind_are_named(config: dict[str, object], problem: str | None) -> None:
    found = holds_need_bind(build_config(config, {}))
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
        assert "--enable-bind" in found
        assert "between 1 and 16" in found
