"""Best-of-K draws and the widening strategies, including the RFC's K blind spot."""

import random

import numpy as np
import pytest

from extender.core.policy import Widening
from extender.core.sampling import best_of_k

NODES = [f"n{i}" for i in range(20)]


def only(*fitting: str) -> set[str]:
    return set(fitting)


@pytest.mark.parametrize("widening", list(Widening))
def test_at_most_k_all_accepted(widening: Widening) -> None:
    for seed in range(30):
        sample = best_of_k(NODES, 3, widening, lambda n: n != "n0", random.Random(seed))
        assert 2 <= len(sample.kept) <= 3
        assert "n0" not in sample.kept
        if widening is Widening.DRAW_UNTIL_K:  # rejected draws do not count towards K
            assert len(sample.kept) == 3


def test_draws_are_without_replacement_and_the_input_is_untouched() -> None:
    nodes = list(NODES)
    sample = best_of_k(nodes, 20, Widening.NONE, lambda n: True, random.Random(7))
    assert sorted(sample.kept) == sorted(NODES)
    assert nodes == NODES


def test_seeded_sampling_is_reproducible() -> None:
    a = best_of_k(NODES, 3, Widening.NONE, lambda n: True, random.Random(42))
    b = best_of_k(NODES, 3, Widening.NONE, lambda n: True, random.Random(42))
    assert a.kept == b.kept


def test_no_candidates_or_k_larger_than_the_list() -> None:
    assert best_of_k([], 3, Widening.FULLSCAN, lambda n: True, random.Random(1)).kept == []
    assert sorted(best_of_k(["a", "b"], 5, Widening.NONE, lambda n: True, random.Random(1)).kept) == ["a", "b"]


def first_sample(seed: int, k: int = 3) -> list[str]:
    return list(best_of_k(NODES, k, Widening.NONE, lambda n: True, random.Random(seed)).kept)


def test_k_blind_spot_without_widening_fails_with_a_free_node_outside_the_sample() -> None:
    seed = 3
    outside = next(n for n in NODES if n not in first_sample(seed))
    sample = best_of_k(NODES, 3, Widening.NONE, lambda n: n == outside, random.Random(seed))
    assert sample.kept == []
    assert not sample.exhausted  # nodes were left unexamined: a false failure


@pytest.mark.parametrize("widening", [Widening.FULLSCAN, Widening.DRAW_UNTIL_K])
def test_fallback_finds_the_one_fitting_node_outside_the_first_sample(widening: Widening) -> None:
    for seed in range(50):
        outside = next(n for n in NODES if n not in first_sample(seed))
        sample = best_of_k(NODES, 3, widening, {outside}.__contains__, random.Random(seed))
        assert sample.kept == [outside]


def test_resample_is_one_more_round_only() -> None:
    seed = 5
    sample = best_of_k(NODES, 3, Widening.RESAMPLE, lambda n: False, random.Random(seed))
    assert len(sample.rejected) == 6
    assert sample.widened
    assert not sample.exhausted


def test_fullscan_stops_widening_once_a_node_fits_in_the_first_round() -> None:
    # one fit among the first K: fullscan keeps it and does not draw on
    seed = 11
    first = first_sample(seed)
    sample = best_of_k(NODES, 3, Widening.FULLSCAN, lambda n: n == first[0], random.Random(seed))
    assert sample.kept == [first[0]]
    assert not sample.widened
    # drawUntilK keeps drawing for two more, finds none, and examines everything
    until_k = best_of_k(NODES, 3, Widening.DRAW_UNTIL_K, lambda n: n == first[0], random.Random(seed))
    assert until_k.kept == [first[0]]
    assert until_k.exhausted


def _fisher_yates_in_place(candidates: list[str], draws: int, rng: random.Random) -> list[str]:
    """The textbook partial shuffle over a copy, to hold the lazy one to."""
    pool = list(candidates)
    for i in range(draws):
        j = rng.randrange(i, len(pool))
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:draws]


@pytest.mark.parametrize("seed", range(20))
def test_draws_are_those_of_a_fisher_yates_shuffle_and_read_only_the_drawn(seed: int) -> None:
    class Counted(list[str]):
        reads = 0

        def __getitem__(self, index):  # type: ignore[no-untyped-def]
            Counted.reads += 1
            return super().__getitem__(index)

    candidates = Counted(NODES)
    sample = best_of_k(candidates, 20, Widening.NONE, lambda n: True, random.Random(seed))
    assert sample.kept == _fisher_yates_in_place(NODES, 20, random.Random(seed))
    Counted.reads = 0
    best_of_k(candidates, 3, Widening.NONE, lambda n: True, random.Random(seed))
    assert Counted.reads == 3


@pytest.mark.parametrize("widening", [Widening.FULLSCAN, Widening.DRAW_UNTIL_K])
@pytest.mark.parametrize("one_in", [100, 300, 400, 1001])  # 10 accepted, 4, 3 (K) and none
@pytest.mark.parametrize("seed", range(10))
def test_a_judged_scan_keeps_what_one_at_a_time_keeps(widening: Widening, one_in: int, seed: int) -> None:
    # 1,000 candidates, few accepted: the scan goes on past its first round, the rest ordered at
    # once; judging them in one step keeps the same ones, in the same order, and rejects the same.
    many = [f"n{i}" for i in range(1000)]
    accepted = {name for i, name in enumerate(many) if i % one_in == 7}
    one_at_a_time = best_of_k(many, 3, widening, accepted.__contains__, random.Random(seed))
    judged = best_of_k(
        many,
        3,
        widening,
        accepted.__contains__,
        random.Random(seed),
        judge=lambda: np.array([name in accepted for name in many], dtype=bool),
    )
    assert judged.kept == one_at_a_time.kept
    if one_at_a_time.rejected_at is None and len(one_at_a_time.rejected) > 3:  # past the first round
        assert len(judged.kept) == min(3, len(accepted))
        assert judged.rejected_at is not None
        assert sorted(many[i] for i in judged.rejected_at.tolist()) == sorted(one_at_a_time.rejected)
    assert (judged.exhausted, judged.widened) == (one_at_a_time.exhausted, one_at_a_time.widened)
