"""``ExtenderVerbs.filter``'s steps, each alone: the rules that need no state (extender/core/filtercall.py),
then ``claim``, ``size_views``, ``window_retry``, ``remember``, ``hold`` and the result, each given one
``FilterCall`` (extender/state/verbs.py). The whole filter is tested by the verbs' own tests
(test_authority.py, test_window.py, test_bind_reservation.py, test_sizes.py, ...)."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from extender.core.answer import FilterDecision, Outcome, Reasons
from extender.core.capacity import headroom_bytes
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.decision import filter_sizes
from extender.core.filtercall import EVERY_CANDIDATE_REJECTED, FilterCall, admitted_for_bind, may_retry_window, owns
from extender.core.holds import HOLD_LIMIT
from extender.core.objects import Node
from extender.core.podrequest import PodDemand
from extender.core.policy import Policy
from extender.core.reach import UNCONSTRAINED, PodReach
from extender.state.cluster import ClusterState
from extender.state.verbs import MAX_UNVERIFIED_HOLDS, UNVERIFIED_HOLD_SECONDS, ExtenderVerbs, FilterResult
from tests.conftest import Clock, GiB, MiB, make_node, make_pod, make_state

NEED = PodDemand({DEFAULT_RESOURCE: 1 * GiB}, cpu_millis=100)
NOTHING = PodDemand({}, cpu_millis=100)  # asks no pages: passed through
NODES = [f"n{i}" for i in range(6)]
CONFIG = {"defaults": {"mode": "enforce", "sampleSize": 6, "holdTimeoutSeconds": 30}}
SHADOW = build_config({"defaults": {"mode": "shadow"}}, {}).policy_for("team")
ENFORCE = build_config(CONFIG, {}).policy_for("team")
FIT_ON = FilterDecision(passed=("n1", "n2"), outcome=Outcome.FIT)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    return make_state(CONFIG, [make_node(n, hugepages="1Gi") for n in NODES], clock=clock)


def verbs(state: ClusterState, **kwargs: Any) -> ExtenderVerbs:
    return ExtenderVerbs(state.config, state, rng=random.Random(1), **kwargs)


def call(
    uid: str,
    name: str,
    demand: PodDemand = NEED,
    candidates: list[str] = NODES,
    policy: Policy = ENFORCE,
    *,
    enforce_entry: bool = False,
    reach: PodReach = UNCONSTRAINED,
) -> FilterCall:
    """The call ``filter(uid, "team", demand, candidates, name=name, ...)`` builds."""
    return FilterCall(
        uid, "team", f"team/{name}", demand, candidates, policy, enforce_entry, reach, demand.sizes_needed
    )


def waiting(state: ClusterState, name: str) -> str:
    """A real pod, as the watch shows it: waiting for a node."""
    pod = make_pod(name, "team", hugepages="1Gi")
    state.apply_pod(pod)
    return pod.metadata.uid


def holds(state: ClusterState) -> dict[str, tuple[str, ...]]:
    return {uid: hold.nodes for uid, hold in state.books[DEFAULT_RESOURCE].holds().items()}


# -- the rules that need no state --------------------------------------------------------------


def test_a_uid_no_watch_shows_and_no_filter_remembers_is_owned_by_the_pod_naming_it() -> None:
    assert owns(None, None, "team/a")
    assert owns(None, "team/a", "team/a")


def test_a_uid_the_watch_shows_as_another_pods_is_never_owned() -> None:
    assert not owns("team/b", None, "team/a")
    assert not owns("team/b", "team/a", "team/a")  # what a caller claimed earlier does not outweigh the watch
    assert owns("team/a", "team/a", "team/a")


def test_a_uid_an_earlier_filter_remembered_as_another_pods_is_owned_only_when_the_watch_shows_this_one() -> None:
    assert not owns(None, "team/b", "team/a")  # without the watch, the UID stays with the pod first filtered
    assert owns("team/a", "team/b", "team/a")


@pytest.mark.parametrize("outcome", list(Outcome))
def test_only_every_candidate_turned_away_through_the_enforce_entry_of_an_enforcing_namespace_may_retry(
    outcome: Outcome,
) -> None:
    decision = FilterDecision(passed=(), outcome=outcome)
    assert may_retry_window(decision, ENFORCE, True) is (outcome in EVERY_CANDIDATE_REJECTED)
    assert not may_retry_window(decision, ENFORCE, False)  # an ignorable entry would place the pod unchecked
    assert not may_retry_window(decision, SHADOW, True)


def test_bind_may_accept_the_nodes_admitted_up_to_the_hold_limit_else_any_node_known() -> None:
    assert admitted_for_bind(["a", "b"], HOLD_LIMIT) == ("a", "b")
    assert admitted_for_bind([], HOLD_LIMIT) == ()
    at_limit = [f"n{i}" for i in range(HOLD_LIMIT)]
    assert admitted_for_bind(at_limit, HOLD_LIMIT) == tuple(at_limit)
    assert admitted_for_bind([*at_limit, "one-more"], HOLD_LIMIT) is None


# -- claim -------------------------------------------------------------------------------------


def test_claim_releases_the_pods_previous_hold_so_it_does_not_compete_with_itself(state: ClusterState) -> None:
    v = verbs(state)
    uid = waiting(state, "a")
    assert v.filter(uid, "team", NEED, NODES[:1], name="a").held
    assert uid in holds(state)
    assert v.claim(call(uid, "a"))
    assert holds(state) == {}


def test_claim_refuses_a_uid_another_pod_owns_and_leaves_its_hold(state: ClusterState) -> None:
    v = verbs(state)
    uid = waiting(state, "a")
    assert v.filter(uid, "team", NEED, NODES[:1], name="a").held
    assert not v.claim(call(uid, "intruder"))
    assert holds(state) == {uid: ("n0",)}


def test_claim_first_ends_what_is_past_its_time(state: ClusterState, clock: Clock) -> None:
    v = verbs(state, verify_holds=True)
    assert v.filter("made-up", "team", NEED, NODES[:1], name="made-up").held  # a pod no watch shows
    clock.now += UNVERIFIED_HOLD_SECONDS + 0.1
    assert v.claim(call("other", "other"))
    assert holds(state) == {}
    assert v.refused_holds == 1  # dropped as not its pod's own


# -- size_views --------------------------------------------------------------------------------


def test_size_views_read_one_view_per_size_asked_in_the_decisions_order() -> None:
    document = {"resourceNames": ["hugepages-2Mi", "hugepages-1Gi"], "defaults": {"mode": "enforce"}}
    both: Any = msgspec.to_builtins(make_node("both", hugepages="1Gi"))
    both["status"]["allocatable"]["hugepages-1Gi"] = "4Gi"
    v = ExtenderVerbs(build_config(document, {}), make_state(document, [msgspec.convert(both, Node)]))
    demand = PodDemand({"hugepages-2Mi": 4 * MiB, "hugepages-1Gi": 1 * GiB}, cpu_millis=100)
    views = v.size_views(call("uid-a", "a", demand, ["both"]))
    assert [view.need for view in views] == [4 * MiB, 1 * GiB]
    assert [view.reasons for view in views] == [
        Reasons.for_resource("hugepages-2Mi"),
        Reasons.for_resource("hugepages-1Gi"),
    ]
    assert [sorted(view.accounts) for view in views] == [["both"], ["both"]]
    assert v.size_views(call("uid-b", "b", NOTHING, ["both"])) == []


def test_size_views_leave_the_holds_of_pods_the_watch_has_not_shown_out_of_a_shown_pods_way(
    state: ClusterState,
) -> None:
    v = verbs(state, verify_holds=True)
    assert v.filter("made-up", "team", NEED, NODES[:1], name="made-up").held
    real = waiting(state, "real")
    (shown,) = v.size_views(call(real, "real"))
    (not_shown,) = v.size_views(call("unshown", "unshown"))
    assert headroom_bytes(shown.accounts["n0"]) == 1 * GiB
    assert headroom_bytes(not_shown.accounts["n0"]) == 0  # against its like, a made-up pod's hold counts


# -- window_retry ------------------------------------------------------------------------------

WINDOW = [f"n{i:03d}" for i in range(100)]  # what the scheduler sends of 300 nodes at 5%: exactly 100
HALF = PodDemand({DEFAULT_RESOURCE: 512 * MiB}, cpu_millis=100)


def window_cluster() -> ExtenderVerbs:
    """300 nodes, every pool held outside pods but n250's, outside the window the scheduler sends."""
    nodes = [make_node(f"n{i:03d}", hugepages="1Gi", reserved=None if i == 250 else "1Gi") for i in range(300)]
    document = {"defaults": {"mode": "enforce"}, "percentageOfNodesToScore": 5}
    return ExtenderVerbs(build_config(document, {}), make_state(document, nodes), rng=random.Random(1))


def turned_away(v: ExtenderVerbs, enforce_entry: bool) -> tuple[FilterCall, FilterDecision, list[Any]]:
    pod = call("uid-a", "a", HALF, WINDOW, v.config.policy_for("team"), enforce_entry=enforce_entry)
    views = v.size_views(pod)
    decision = filter_sizes(HALF, WINDOW, views=views, policy=pod.policy, rng=v.rng)
    assert not decision.passed
    return pod, decision, views


def test_window_retry_numbers_the_retries_while_a_node_outside_the_window_would_hold_the_pod() -> None:
    v = window_cluster()
    pod, decision, views = turned_away(v, enforce_entry=True)
    assert [v.window_retry(pod, decision, views) for _ in range(4)] == [1, 2, 3, 0]  # 3 windows cover 300 nodes


def test_window_retry_is_none_for_a_pod_not_sent_through_the_enforce_entry() -> None:
    v = window_cluster()
    pod, decision, views = turned_away(v, enforce_entry=False)
    assert v.window_retry(pod, decision, views) == 0
    assert len(v.window_retries) == 0


def test_window_retry_ends_the_run_of_a_pod_admitted_somewhere() -> None:
    v = window_cluster()
    pod, decision, views = turned_away(v, enforce_entry=True)
    assert v.window_retry(pod, decision, views) == 1
    assert v.window_retry(pod, FilterDecision(passed=("n250",), outcome=Outcome.FIT), views) == 0
    assert len(v.window_retries) == 0
    assert v.window_retry(pod, decision, views) == 1  # turned away again: a new run


# -- remember, hold, the result ----------------------------------------------------------------


def test_remember_lets_bind_take_the_pod_only_to_a_node_admitted(state: ClusterState) -> None:
    v = verbs(state)
    v.remember(call("uid-a", "a"), FIT_ON)
    assert v.bind_refusal("uid-a", "team", "a", "n1") is None
    assert v.bind_refusal("uid-a", "team", "a", "n0") is not None
    assert v.bind_refusal("uid-a", "team", "b", "n1") is not None  # another pod under the same UID
    many = FilterDecision(passed=tuple(f"x{i}" for i in range(HOLD_LIMIT + 1)), outcome=Outcome.FIT)
    v.remember(call("uid-b", "b"), many)
    assert v.bind_refusal("uid-b", "team", "b", "n5") is None  # more than HOLD_LIMIT: any node this extender knows
    assert v.bind_refusal("uid-b", "team", "b", "elsewhere") is not None


def test_hold_places_an_enforced_pods_need_on_the_nodes_admitted(state: ClusterState) -> None:
    uid = waiting(state, "a")
    assert verbs(state).hold(call(uid, "a"), FIT_ON)
    assert holds(state) == {uid: ("n1", "n2")}


def test_hold_places_nothing_for_no_pages_a_shadow_namespace_or_without_holds_in_flight(state: ClusterState) -> None:
    uid = waiting(state, "a")
    assert not verbs(state).hold(call(uid, "a", NOTHING), FIT_ON)
    assert not verbs(state).hold(call(uid, "a", policy=SHADOW), FIT_ON)
    assert not verbs(state, hold_in_flight=False).hold(call(uid, "a"), FIT_ON)
    assert holds(state) == {}


def test_hold_refuses_and_counts_pods_the_watch_has_not_shown_past_their_limit(state: ClusterState) -> None:
    v = verbs(state, verify_holds=True)
    made_up = [v.hold(call(f"made-up-{i}", f"made-up-{i}"), FIT_ON) for i in range(MAX_UNVERIFIED_HOLDS + 1)]
    assert made_up == [True] * MAX_UNVERIFIED_HOLDS + [False]
    assert v.refused_holds == 1
    real = waiting(state, "real")
    assert v.hold(call(real, "real"), FIT_ON)  # a pod the watch shows is not held to that limit


def test_the_result_carries_the_need_policy_and_sizes_the_call_read() -> None:
    pod = call("uid-a", "a")
    result = FilterResult.of(pod, FIT_ON, held=True, refused=2, shown=True, window_retry=0)
    assert result == FilterResult(FIT_ON, NEED, ENFORCE, True, 2, True, 0, (DEFAULT_RESOURCE,))


def test_filter_refuses_another_pods_uid_a_hold_and_a_record_for_bind(state: ClusterState) -> None:
    v = verbs(state)
    uid = waiting(state, "a")
    result = v.filter(uid, "team", NEED, NODES, name="intruder")
    assert result.decision.passed  # decided as for any pod
    assert (result.held, result.refused, result.shown) == (False, 1, False)
    assert v.bind_refusal(uid, "team", "intruder", "n0") is not None
    assert holds(state) == {}
