"""Best-of-K sampling of candidate nodes, with the widening strategies.

Draws are without replacement (a partial Fisher-Yates shuffle that keeps only
the positions it swapped), each O(1), so a decision costs O(draws), not
O(nodes): with best-of-K a filter over 5,000 candidates reads about K of them.
A widened scan over many candidates (fullscan, drawUntilK after a first round
of K) orders every candidate left at once instead, by a random key each (keys
drawn from a generator seeded from the same one): on a nearly full cluster it
goes on until K of thousands fit, and a caller that can judge many candidates
at once (``judge``) then judges them in one step and sorts only the keys it
needs, with the same picks as one at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from extender.policy import Widening

T = TypeVar("T")
Positions = npt.NDArray[np.intp]
# Given positions of candidates, whether each is accepted (as ``accept`` on each, in one step).
Judge = Callable[[Positions], npt.NDArray[np.bool_]]
SHUFFLE_REST_ABOVE = 64  # a scan over more candidates left than this orders them all at once


@dataclass(frozen=True, slots=True)
class Sample(Generic[T]):
    kept: Sequence[T]  # accepted candidates: at most K, or every one when all are examined
    rejected: Sequence[T]  # candidates examined and not accepted
    exhausted: bool  # every candidate was examined
    widened: bool  # the widening strategy had to act
    # With ``judge``: the positions of every rejected candidate, in no particular order
    # (``rejected`` is then only those of the first rounds: the caller reads the rest off these).
    rejected_at: Positions | None = None


def _random_order(size: int, rng: random.Random, moved: dict[int, int]) -> Iterator[int]:
    """Positions of the candidates in random order, drawn one at a time without replacement: a
    Fisher-Yates shuffle that records only the positions it swapped (in ``moved``: position ->
    index of the candidate now there), so a draw costs O(1) and the candidates are never copied.
    A generator: a scan makes hundreds of draws, and resuming one costs less than a method call."""
    randrange = rng.randrange
    for i in range(size):
        j = randrange(i, size)
        picked = moved.get(j, j)
        moved[j] = moved.get(i, i)
        yield picked


def _rest_with_keys(
    size: int, drawn: int, moved: dict[int, int], rng: random.Random
) -> tuple[Positions, npt.NDArray[np.float64]]:
    """The candidates not drawn yet (after ``drawn`` draws of ``_random_order``) and a random key
    each, drawn at once from a numpy generator seeded from ``rng``. Their order is that of the
    keys (a tie, which 53-bit keys make very rare, by place in ``rest``)."""
    rest = np.arange(drawn, size, dtype=np.intp)
    for position, index in moved.items():
        if position >= drawn:
            rest[position - drawn] = index
    keys = np.random.Generator(np.random.SFC64(rng.getrandbits(64))).random(len(rest))
    return rest, keys


def _by_key(places: Positions, keys: npt.NDArray[np.float64]) -> Positions:
    """``places`` (ascending places in ``rest``) in the order of their keys, ties by place."""
    ordered: Positions = places[np.argsort(keys[places], kind="stable")]
    return ordered


def _in_key_order(keys: npt.NDArray[np.float64]) -> Iterator[int]:
    """Every place in the order of its key, sorted a growing chunk at a time (a scan mostly
    stops early): the smallest keys first, found by a partition, then sorted."""
    after = -1.0  # keys are in [0, 1)
    chunk = SHUFFLE_REST_ABOVE
    while True:
        pending = np.flatnonzero(keys > after)
        if not len(pending):
            return
        if len(pending) > chunk:
            bound = np.partition(keys[pending], chunk - 1)[chunk - 1]
            pending = pending[keys[pending] <= bound]
        ordered = _by_key(pending, keys)
        yield from ordered.tolist()
        after = float(keys[ordered[-1]])
        chunk *= 8


def best_of_k(  # noqa: PLR0915 (one scan, its rounds and its widenings)
    candidates: Sequence[T],
    k: int,
    widening: Widening,
    accept: Callable[[T], bool],
    rng: random.Random,
    *,
    judge: Judge | None = None,
) -> Sample[T]:
    """Keep up to ``k`` (at least 1) accepted candidates, drawn at random.

    A widened scan (fullscan, drawUntilK) over more than ``SHUFFLE_REST_ABOVE`` candidates left
    orders them all at once and goes through that order until enough are kept: one at a time
    with ``accept``, or with ``judge`` (which must agree with ``accept``) in one step, the same
    picks. The sample then says every rejected candidate's position (``rejected_at``)."""
    size = len(candidates)
    moved: dict[int, int] = {}
    order = _random_order(size, rng, moved)
    drawn = 0
    kept: list[T] = []
    rejected: list[T] = []
    rejected_positions: list[int] = []

    def draw_round(limit: int, stop_at: int) -> None:
        nonlocal drawn
        for _ in range(min(limit, size - drawn)):
            if len(kept) >= stop_at:
                return
            at = next(order)
            drawn += 1
            candidate = candidates[at]
            if accept(candidate):
                kept.append(candidate)
            else:
                rejected.append(candidate)
                rejected_positions.append(at)

    def scan_rest(stop_at: int) -> Positions | None:
        """Draw on until ``stop_at`` are kept or none are left; with ``judge``, every rejected
        candidate's position."""
        nonlocal drawn
        if size - drawn <= SHUFFLE_REST_ABOVE:
            draw_round(size - drawn, stop_at)
            return None
        rest, keys = _rest_with_keys(size, drawn, moved, rng)
        if judge is None:
            for place in _in_key_order(keys):
                if len(kept) >= stop_at:
                    break
                drawn += 1
                candidate = candidates[int(rest[place])]
                (kept if accept(candidate) else rejected).append(candidate)
            return None
        accepted = judge(rest)
        fitting = np.flatnonzero(accepted)
        wanted = stop_at - len(kept)
        if len(fitting) < wanted:  # every candidate is examined
            drawn = size
            fitting = _by_key(fitting, keys)
            seen = ~accepted
        else:  # up to the wanted-th fitting candidate in key order (ties by place)
            bound = np.partition(keys[fitting], wanted - 1)[wanted - 1]
            fitting = _by_key(fitting[keys[fitting] <= bound], keys)[:wanted]
            last = int(fitting[-1])
            seen = ~accepted & ((keys < bound) | ((keys == bound) & (np.arange(len(rest)) < last)))
            drawn += int(np.count_nonzero(seen)) + wanted
        kept.extend(candidates[at] for at in rest[fitting].tolist())
        return np.concatenate((np.array(rejected_positions, dtype=np.intp), rest[seen]))

    rejected_at = None
    if widening is Widening.DRAW_UNTIL_K:
        draw_round(k, k)
        if len(kept) < k and size - drawn:
            rejected_at = scan_rest(k)
        widened = bool(rejected) if rejected_at is None else bool(len(rejected_at))
        return Sample(kept, rejected, drawn == size, widened=widened, rejected_at=rejected_at)

    draw_round(k, k)
    widened = False
    if not kept and size - drawn:
        if widening is Widening.RESAMPLE:
            widened = True
            draw_round(k, k)
        elif widening is Widening.FULLSCAN:
            widened = True
            rejected_at = scan_rest(k)
    return Sample(kept, rejected, exhausted=drawn == size, widened=widened, rejected_at=rejected_at)
