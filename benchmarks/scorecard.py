"""Memory of shadow's scorecard at a steady rate of pods placed (issue 32: 100,000 pods an hour).

A simulated clock drives ``extender.state.scorecard.Scorecard`` as the extender does: each pod is judged
when placed, its status arrives some seconds later (Ready, then ran after the settle time; a failure;
a deletion), a share of pods never shows an outcome (they expire after the window), and the timer
ticks every second. The scorecard's own memory (tracemalloc, everything allocated since it was made)
is sampled every simulated ten minutes; a second run places pods that never show any outcome, the
worst case, where the cap on pods followed (``MAX_FOLLOWED``) bounds it.

    python -m benchmarks.scorecard            # 100,000 pods an hour for 4 hours, then the worst case
    python -m benchmarks.scorecard --quick    # 1 hour
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import tracemalloc
import uuid
from typing import Any

from extender.core.config import DEFAULT_SHADOW_SETTLE_SECONDS, DEFAULT_SHADOW_WINDOW_SECONDS
from extender.core.podoutcome import PodSignal, Prediction
from extender.state.scorecard import MAX_FOLLOWED, Scorecard

NAMESPACES = [f"team-{i:02d}" for i in range(20)]  # 10 named in the config, 10 folded into _other
NAMED = set(NAMESPACES[:10])
READY = PodSignal(ready=True)
FAILED = PodSignal(failure="OutOfhugepages-2Mi: Pod was rejected: Node didn't have enough resource: hugepages-2Mi")
GONE = PodSignal(deleting=True)
SAMPLE_SECONDS = 600.0


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(pods_per_hour: int, hours: float, *, outcomes: bool = True, seed: int = 1) -> dict[str, Any]:
    """Place pods at ``pods_per_hour`` for ``hours``; the scorecard's memory over time."""
    rng = random.Random(seed)
    clock = _Clock()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    card = Scorecard(
        settle_seconds=DEFAULT_SHADOW_SETTLE_SECONDS,
        window_seconds=DEFAULT_SHADOW_WINDOW_SECONDS,
        clock=clock,
        row_of=lambda ns: ns if ns in NAMED else "_other",
        rows=tuple(sorted(NAMED)),
    )
    events: list[tuple[float, int, str, PodSignal]] = []  # (when, order, uid, status)
    interval, end, order = 3600.0 / pods_per_hour, hours * 3600.0, 0
    next_pod, next_tick, next_sample = 0.0, 1.0, SAMPLE_SECONDS
    samples: list[dict[str, float]] = []
    placed = 0
    while clock.now < end:
        clock.now = min(next_pod, next_tick, events[0][0] if events else end)
        while events and events[0][0] <= clock.now:
            _, _, uid, signal = heapq.heappop(events)
            card.seen(uid, signal)
        if clock.now >= next_tick:
            card.tick()
            next_tick += 1.0
        if clock.now >= next_sample:
            samples.append({"hour": next_sample / 3600, "bytes": tracemalloc.get_traced_memory()[0] - base})
            samples[-1]["followed"] = card.followed
            next_sample += SAMPLE_SECONDS
        if clock.now >= next_pod:
            uid, namespace = str(uuid.UUID(int=rng.getrandbits(128))), rng.choice(NAMESPACES)
            prediction = Prediction(rng.random() < 0.2, "Insufficient hugepages-2Mi", "bind")
            card.judged(uid, namespace, f"vm-{placed:07d}-{uid[:8]}", f"node-{rng.randrange(5000):05d}", prediction)
            placed += 1
            if outcomes:
                fate = rng.random()
                start = clock.now + rng.uniform(2, 60)  # image pull and start-up
                if fate < 0.02:
                    pass  # never shows an outcome: it expires after the window
                else:
                    signal = FAILED if fate < 0.15 else GONE if fate < 0.2 else READY
                    order += 1
                    heapq.heappush(events, (start, order, uid, signal))
            next_pod += interval
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {
        "pods_per_hour": pods_per_hour,
        "hours": hours,
        "outcomes": outcomes,
        "placed": placed,
        "peak_mib": round(peak / 2**20, 2),
        "samples": [
            {"hour": round(s["hour"], 2), "mib": round(s["bytes"] / 2**20, 2), "followed": int(s["followed"])}
            for s in samples
        ],
        "max_followed": MAX_FOLLOWED,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pods-per-hour", type=int, default=100_000)
    args = parser.parse_args()
    hours = 1.0 if args.quick else 4.0
    for outcomes in (True, False):
        result = simulate(args.pods_per_hour, hours if outcomes else 1.0, outcomes=outcomes)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
