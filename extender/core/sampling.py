"""Best-of-K sampling of candidate nodes, with the widening strategies.

Draws are without replacement (a partial Fisher-Yates shuffle that keeps only
the positions it swapped), each O(1), so a decision costs O(draws), not
O(nodes): with best-of-K a filter over 5,000 candidates reads about K of them.
A widened scan over many candidates (fullscan, drawUntilK, after a first round
of K draws) orders every candidate left at once instead, by a random key each,
drawn from a numpy generator whose state comes from the same ``random.Random``:
on a nearly full cluster it goes on until K of thousands fit, and a caller that
can judge many candidates at once (``judge``) then judges them in one step and
sorts only the keys it needs, with the same picks as one at a time.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from extender.core.policy import Widening

T = TypeVar("T")
Positions = npt.NDArray[np.intp]
# Whether each candidate is accepted, by position (as ``accept`` on each, in one step; a new array).
Judge = Callable[[], npt.NDArray[np.bool_]]
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


def _random_order(size: int, rng: random.Random) -> Iterator[int]:
    """Positions of the candidates in random order, drawn one at a time without replacement: a
    Fisher-Yates shuffle that records only the positions it swapped, so a draw costs O(1) and the
    candidates are never copied. A generator: resuming one costs less than a method call."""
    moved: dict[int, int] = {}  # position -> index of the candidate now there
    randrange = rng.randrange
    for i in range(size):
        j = randrange(i, size)
        picked = moved.get(j, j)
        moved[j] = moved.get(i, i)
        yield picked


def _keys(size: int, drawn: list[int], rng: random.Random) -> npt.NDArray[np.float64]:
    """A random key in [0, 1) for each candidate, drawn at once from a numpy generator whose state
    comes from ``rng``; those already ``drawn`` (their positions) get infinity. The candidates left are taken
    in the order of their keys (a tie, which 53-bit keys make very rare, by position)."""
    generator = _generators.get(rng)
    if generator is None:
        generator = _generators[rng] = np.random.Generator(np.random.SFC64(0))
    # The whole state from ``rng`` (SFC64: three words and a counter), so nothing of an earlier
    # call carries over; seeding through numpy's SeedSequence cost as much as drawing the keys.
    generator.bit_generator.state = {
        "bit_generator": "SFC64",
        "state": {"state": np.array([rng.getrandbits(64) for _ in range(3)] + [1], dtype=np.uint64)},
        "has_uint32": 0,
        "uinteger": 0,
    }
    keys = generator.random(size)
    keys[drawn] = np.inf
    return keys


# One numpy generator per ``random.Random`` (whose caller owns both: no two threads share one),
# its state set from that generator before each use.
_generators: weakref.WeakKeyDictionary[random.Random, np.random.Generator] = weakref.WeakKeyDictionary()


def _by_key(places: Positions, keys: npt.NDArray[np.float64]) -> Positions:
    """``places`` (ascending positions) in the order of their keys, ties by position."""
    ordered: Positions = places[np.argsort(keys[places], kind="stable")]
    return ordered


def _in_key_order(keys: npt.NDArray[np.float64]) -> Iterator[int]:
    """The position of every finite key in key order, sorted a growing chunk at a time (a scan
    mostly stops early): the smallest keys first, found by a partition, then sorted."""
    after = -1.0  # keys are in [0, 1)
    chunk = SHUFFLE_REST_ABOVE
    while True:
        pending = np.flatnonzero((keys > after) & (keys < 1.0))
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
    order = _random_order(size, rng)
    drawn = 0
    kept: list[T] = []
    rejected: list[T] = []
    drawn_positions: list[int] = []
    rejected_positions: list[int] = []

    def draw_round(limit: int, stop_at: int) -> None:
        nonlocal drawn
        for _ in range(min(limit, size - drawn)):
            if len(kept) >= stop_at:
                return
            at = next(order)
            drawn += 1
            drawn_positions.append(at)
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
        keys = _keys(size, drawn_positions, rng)
        if judge is None:
            for at in _in_key_order(keys):
                if len(kept) >= stop_at:
                    break
                drawn += 1
                candidate = candidates[at]
                (kept if accept(candidate) else rejected).append(candidate)
            return None
        accepted = judge()
        accepted[drawn_positions] = False
        fitting = np.flatnonzero(accepted)
        wanted = stop_at - len(kept)
        if len(fitting) < wanted:  # every candidate is examined
            drawn = size
            fitting = _by_key(fitting, keys)
            seen = np.flatnonzero(~accepted & (keys < 1.0))
        else:  # up to the wanted-th fitting candidate in key order (ties by position)
            bound = np.partition(keys[fitting], wanted - 1)[wanted - 1]
            fitting = _by_key(fitting[keys[fitting] <= bound], keys)[:wanted]
            seen = np.flatnonzero(keys <= bound)  # few: about K in the share that fits
            seen = seen[~accepted[seen]]
            if len(seen) and (keys[seen] == bound).any():  # a tie with the last kept: by position
                seen = seen[(keys[seen] < bound) | (seen < fitting[-1])]
            drawn += len(seen) + wanted
        kept.extend(candidates[at] for at in fitting.tolist())
        return np.concatenate((np.array(rejected_positions, dtype=np.intp), seen))

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
