"""The replay's headline, pinned: on a ladder that runs the cluster out of hugepages,
enforce with fullscan and the server's in-flight holds never sends a pod to a node
that cannot hold it, and with the bind verb (or K = 1) never rejects one that some
node could hold; off sends pods to full nodes; shadow places exactly as off does."""

from __future__ import annotations

import dataclasses

import pytest

from replay.model import Blind, Scenario, parse_variant
from replay.scenario import quick_scenario
from replay.shadowgrade import ShadowGrades
from replay.simulate import Replay, VariantRun, run_variant
from replay.tally import merge

SEED = 7
# Binds as slow as in a burst (the mean `python -m benchmarks hold` measured for 300 pods
# created at once): holds then last long enough for their effects to show on 24 nodes.
BURST_BIND_DELAY_SECONDS = 0.54


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    quick = quick_scenario()
    return dataclasses.replace(
        quick, timing=dataclasses.replace(quick.timing, bind_delay_seconds=BURST_BIND_DELAY_SECONDS)
    )


def replay(scenario: Scenario, spec: str) -> VariantRun:
    return run_variant(scenario, parse_variant(spec), seed=SEED)


def test_the_ladder_runs_the_cluster_out_of_hugepages(scenario: Scenario) -> None:
    # Otherwise the headline below would hold trivially.
    top = replay(scenario, "enforce:fullscan:k3:inflight=bind").steps[-1]
    assert top.failed_decision > 0
    assert top.outcomes["no_hugepage_capacity"] == top.failed_decision


@pytest.mark.parametrize(
    "spec",
    [
        "enforce:fullscan:k3:inflight=bind",  # the extender as binder: the hold narrows to every pick
        "enforce:fullscan:k1",  # no bind verb, but the filter leaves one node: its hold is the pick
        "enforce:drawUntilK:k3:inflight=bind",
        "enforce:fullscan:k0:inflight=bind",
    ],
)
def test_enforce_with_full_widening_and_in_flight_accounting_never_fails_on_the_node(
    scenario: Scenario, spec: str
) -> None:
    run = replay(scenario, spec)
    total = merge(run.steps)
    assert total.failed_node == 0
    assert total.false_failures == 0
    assert total.placed > 0


def test_off_fails_on_the_node_once_pools_fill(scenario: Scenario) -> None:
    run = replay(scenario, "off")
    assert run.steps[0].failed_node == 0  # 10 pods in flight: plenty of room
    assert run.steps[-1].failed_node > 0
    assert merge(run.steps).failed_decision == 0  # off never rejects


def test_shadow_places_exactly_as_off(scenario: Scenario) -> None:
    off = replay(scenario, "off")
    shadow = replay(scenario, "shadow")
    assert shadow.placements == off.placements
    assert shadow.placements_digest == off.placements_digest
    # ...while it did evaluate the fit: its would-be rejections are tallied.
    total = merge(shadow.steps)
    assert total.shadow.predicted_and_failed > 0
    assert merge(off.steps).shadow.observed == 0
    # Graded as the live scorecard grades (false alarms and misses paired per node and burst): every pod
    # that reached its node once, the failures on the node all in the two failed cells.
    assert total.shadow.observed == total.placed + total.failed_node
    assert total.shadow.predicted_and_failed + total.shadow.missed_failure == total.failed_node


def test_shadow_pairs_a_false_alarm_and_a_miss_on_one_node_in_one_burst(scenario: Scenario) -> None:
    """Without the pairing (a burst of no time) some false alarms and misses stay; with it, fewer, by
    as many of each, and the pods predicted stay as many."""
    alone = Replay(scenario, parse_variant("shadow"), seed=SEED, blind=Blind.LEAST_CPU, tick=lambda: None)
    alone.shadow = ShadowGrades(alone.steps, lambda: alone.now, horizon_seconds=2 * alone.end, pair_seconds=0.0)
    unpaired = merge(alone.run().steps).shadow
    paired = merge(replay(scenario, "shadow").steps).shadow
    pairs = unpaired.missed_failure - paired.missed_failure
    assert pairs > 0
    assert unpaired.predicted_but_placed - paired.predicted_but_placed == pairs
    assert paired.predicted_and_failed - unpaired.predicted_and_failed == pairs
    assert paired.predicted_placed - unpaired.predicted_placed == pairs


def test_without_widening_the_k_sample_rejects_pods_some_node_could_hold(scenario: Scenario) -> None:
    # The RFC's K blind spot: sample K, filter afterwards, give up.
    total = merge(replay(scenario, "enforce:none:k3:inflight=bind").steps)
    assert total.false_failures > 0
    assert total.outcomes["no_fit_in_sample"] > 0


def test_without_the_bind_verb_the_filters_holds_keep_k3_off_full_nodes(scenario: Scenario) -> None:
    # server.py without the bind verb: the filter holds the pod's need on each of
    # the (up to) K nodes it admits until the pod shows up bound, so the picked
    # node is always among the held ones and no pod is sent to a full node...
    total = merge(replay(scenario, "enforce:fullscan:k3").steps)
    assert total.failed_node == 0
    assert total.placed > 0
    # ...at a price: the holds on the K - 1 nodes the pod does not go to turn
    # pods away that one of those nodes could hold. The bind verb releases them
    # at the pick (test above: zero false failures).
    assert total.false_failures > 0
    assert total.outcomes["no_hugepage_capacity"] == total.failed_decision


def test_without_any_in_flight_accounting_a_burst_overfills_nodes(scenario: Scenario) -> None:
    total = merge(replay(scenario, "enforce:fullscan:k3:inflight=none").steps)
    assert total.failed_node > 0
    assert total.false_failures == 0


def test_a_run_is_a_function_of_its_seed(scenario: Scenario) -> None:
    first = replay(scenario, "enforce:fullscan:k3:inflight=bind")
    again = replay(scenario, "enforce:fullscan:k3:inflight=bind")
    other = run_variant(scenario, parse_variant("enforce:fullscan:k3:inflight=bind"), seed=SEED + 1)
    assert first.placements == again.placements
    assert first.placements != other.placements
