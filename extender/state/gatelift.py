"""Which gated pods to lift now (``extender.core.gates``): a round, run on the server's timers when room
freed (the release timer) or pods came behind the gate (the lift timer).

Each pod, in the queue's order, is lifted when its own filter would admit it on some node it may use
(``ExtenderVerbs.lift``, which holds its need there); a pod no node would hold leaves the others of its
kind (same namespace, need and reach) behind it for this round. A round is bounded, in lifts and in
time, so it never stalls the event loop that answers the scheduler; what it leaves is the next round's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from extender.core.gates import GatedPod, GatedPods
from extender.state.verbs import ExtenderVerbs

LIFTS_PER_ROUND = 32
ROUND_SECONDS = 0.02  # a round's share of the event loop; rounds run every lift tick (0.1 s) while needed


@dataclass(frozen=True, slots=True)
class Round:
    lifted: list[tuple[GatedPod, str]]  # each pod lifted, with the node its need is held on ("" for none)
    unfinished: bool  # a bound ended the round: the next lift tick runs another
    no_room: list[GatedPod]  # pods no node they may use would hold now (their WaitingForRoom Event's)


def lift_round(
    gated: GatedPods,
    verbs: ExtenderVerbs,
    now: float,
    *,
    may_write: Callable[[], bool],
    clock: Callable[[], float],
) -> Round:
    """The pods to lift now, their needs held; ``may_write``: whether one more API write is within budget."""
    state = verbs.state
    blocked: set[bytes] = set()
    usable_of: dict[bytes, list[str]] = {}
    lifted: list[tuple[GatedPod, str]] = []
    no_room: list[GatedPod] = []
    started = clock()
    for pod in gated.in_order(now):
        if pod.kind in blocked:
            no_room.append(pod)
            continue
        if len(lifted) >= LIFTS_PER_ROUND or clock() - started > ROUND_SECONDS:
            return Round(lifted, True, no_room)
        usable = usable_of.get(pod.kind)
        if usable is None:
            reach = pod.reach
            usable = usable_of[pod.kind] = [
                name
                for name in state.nodes()
                if (node := state.reach_of(name)) is not None and reach.may_use(name, node)
            ]
        node_name = verbs.lift(pod, usable)
        if node_name is None:
            blocked.add(pod.kind)
            no_room.append(pod)
            continue
        if not may_write():  # past the writes' budget: its hold goes, the next round tries again
            state.release(pod.uid)
            return Round(lifted, True, no_room)
        gated.sent(pod.uid, now)
        lifted.append((pod, node_name))
    return Round(lifted, False, no_room)
