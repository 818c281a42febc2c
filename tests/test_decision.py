"""filter_nodes and prioritize_nodes: the RFC's unit cases, per mode."""

import random

import pytest

from extender.core.answer import FilterDecision, Outcome, Reasons
from extender.core.capacity import NodeAccount
from extender.core.config import DEFAULT_RESOURCE
from extender.core.decision import filter_nodes, prioritize_nodes
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy, Widening
from tests.conftest import make_account

MiB = 1024 * 1024
PAGE = 2 * MiB
REASONS = Reasons.for_resource("hugepages-2Mi")
NEED = PodDemand({DEFAULT_RESOURCE: 512 * MiB}, cpu_millis=1000)  # 256 pages


ACCOUNTS = {
    "roomy": make_account(1000, cpus=8),
    "near-full": make_account(1000, used=745, cpus=8),  # 255 free < 256
    "full": make_account(1000, used=1000, cpus=8),
    "small": make_account(200, cpus=8),  # 200 < 256: never fits
    "no-pool": NodeAccount(cpu_millis=8000),
}


def run(
    candidates: list[str], mode: Mode = Mode.ENFORCE, k: int = 0, widening: Widening = Widening.FULLSCAN
) -> FilterDecision:
    policy = Policy(mode=mode, sample_size=k, widening=widening)
    return filter_nodes(NEED, candidates, accounts=ACCOUNTS, policy=policy, reasons=REASONS, rng=random.Random(1))


def test_near_full_node_is_excluded() -> None:
    d = run(["roomy", "near-full"])
    assert d.passed == ["roomy"]
    assert d.failed == {"near-full": REASONS.insufficient}
    assert d.outcome is Outcome.FIT


def test_all_full_set_is_empty_with_a_distinct_no_capacity_outcome() -> None:
    d = run(["near-full", "full"])
    assert d.passed == []
    assert d.outcome is Outcome.NO_HUGEPAGE_CAPACITY
    assert d.failed == {"near-full": REASONS.insufficient, "full": REASONS.insufficient}


def test_pools_too_small_are_unresolvable_and_say_no_compatible_node() -> None:
    d = run(["small"])
    assert d.passed == []
    assert d.unresolvable == {"small": REASONS.exceeds_pool}
    assert d.failed == {}
    assert d.outcome is Outcome.NO_COMPATIBLE_NODE


def test_mixed_full_and_too_small_is_no_capacity() -> None:
    # preemption or scale-down elsewhere could free "full"; "small" can never hold the pod
    assert run(["small", "full"]).outcome is Outcome.NO_HUGEPAGE_CAPACITY


def test_no_candidates_is_no_compatible_node() -> None:
    assert run([]).outcome is Outcome.NO_COMPATIBLE_NODE


def test_no_pool_and_unknown_nodes_are_unaffected() -> None:
    d = run(["no-pool", "never-heard-of-it", "full"])
    assert d.passed == ["no-pool", "never-heard-of-it"]


def test_reason_strings_are_constant_and_carry_no_figures() -> None:
    d = run(["near-full", "full", "small"])
    reasons = set(d.failed.values()) | set(d.unresolvable.values())
    assert reasons == {REASONS.insufficient, REASONS.exceeds_pool}
    assert not any(ch.isdigit() for r in reasons for ch in r.replace("hugepages-2Mi", ""))


def test_shadow_passes_everything_and_counts_would_be_rejections() -> None:
    candidates = ["roomy", "near-full", "full", "small", "no-pool"]
    d = run(candidates, Mode.SHADOW)
    assert d.passed == candidates
    assert d.failed == d.unresolvable == {}
    assert (d.insufficient, d.exceeds_pool) == (2, 1)
    assert d.outcome is Outcome.SHADOW


def test_off_is_todays_behaviour() -> None:
    candidates = ["roomy", "near-full", "full", "small"]
    d = run(candidates, Mode.OFF)
    assert d.passed == candidates
    assert d.outcome is Outcome.PASSTHROUGH
    assert d.insufficient == 0


@pytest.mark.parametrize("mode", list(Mode))
def test_pods_without_hugepages_pass_in_every_mode(mode: Mode) -> None:
    policy = Policy(mode=mode)
    d = filter_nodes(
        PodDemand({DEFAULT_RESOURCE: 0}, 1000),
        ["full", "small"],
        accounts=ACCOUNTS,
        policy=policy,
        reasons=REASONS,
        rng=random.Random(),
    )
    assert d.passed == ["full", "small"]
    assert d.outcome is Outcome.PASSTHROUGH


def test_k_limits_the_answer_and_fullscan_reaches_outside_the_sample() -> None:
    candidates = [f"full-{i}" for i in range(30)] + ["roomy"]
    accounts = {
        **{c: make_account(1000, used=1000, cpus=8) for c in candidates[:-1]},
        "roomy": make_account(1000, cpus=8),
    }
    for seed in range(20):
        policy = Policy(mode=Mode.ENFORCE, sample_size=3, widening=Widening.FULLSCAN)
        d = filter_nodes(NEED, candidates, accounts=accounts, policy=policy, reasons=REASONS, rng=random.Random(seed))
        assert d.passed == ["roomy"]
        assert d.chosen == "roomy"


def test_no_widening_reports_unexamined_nodes_instead_of_dropping_them() -> None:
    candidates = [f"full-{i}" for i in range(30)] + ["roomy"]
    accounts = {
        **{c: make_account(1000, used=1000, cpus=8) for c in candidates[:-1]},
        "roomy": make_account(1000, cpus=8),
    }
    misses = 0
    for seed in range(20):
        policy = Policy(mode=Mode.ENFORCE, sample_size=3, widening=Widening.NONE)
        d = filter_nodes(NEED, candidates, accounts=accounts, policy=policy, reasons=REASONS, rng=random.Random(seed))
        if not d.passed:
            misses += 1
            assert d.outcome is Outcome.NO_FIT_IN_SAMPLE
            assert set(d.failed) == set(candidates)  # every node accounted for
            assert list(d.failed.values()).count(REASONS.not_sampled) == len(candidates) - 3
    assert misses > 0  # the blind spot is real


def test_prioritize_uses_the_same_accounting_and_is_neutral_unless_enforcing() -> None:
    names = ["roomy", "near-full", "no-pool"]
    enforce = dict(prioritize_nodes(NEED, names, accounts=ACCOUNTS, policy=Policy(mode=Mode.ENFORCE)))
    # roomy: 512 / 2000 = 0.256 -> round(7.44) = 7; near-full: (512 + 1490 + 745) / 2000 > 1 -> 0; no pool: 0.5 -> 5
    assert enforce == {"roomy": 7, "near-full": 0, "no-pool": 5}
    for mode in (Mode.OFF, Mode.SHADOW):
        assert list(prioritize_nodes(NEED, names, accounts=ACCOUNTS, policy=Policy(mode=mode))) == [
            (n, 0) for n in names
        ]


def test_shadow_counts_every_candidate_given_even_a_repeated_one() -> None:
    d = run(["near-full", "near-full", "small", "small", "small", "roomy"], Mode.SHADOW)
    assert (d.insufficient, d.exceeds_pool) == (2, 3)
