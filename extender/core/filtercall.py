"""A filter call as its steps read it, and the rules of those steps that need no state.

``ExtenderVerbs.filter`` (extender/state/verbs.py) is a short pipeline: claim the pod's UID, read each
size's view, decide, answer a window retry or remember the pod for bind and hold its need. Each
step takes the one ``FilterCall`` built when the call comes in; the rules below decide from values
the steps read, so each is tested alone (tests/test_filter_steps.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from extender.core.answer import FilterDecision, Outcome
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy
from extender.core.reach import PodReach

# Outcomes of a decision that examined every candidate and admitted none: only these may send the
# pod to the scheduler's next window (a sample that held none left candidates unexamined).
EVERY_CANDIDATE_REJECTED = (Outcome.NO_HUGEPAGE_CAPACITY, Outcome.NO_COMPATIBLE_NODE)


class FilterCall(msgspec.Struct, frozen=True, gc=False):
    """One filter call's inputs, read once: the pod (``uid``, ``namespace``, ``owner`` its
    ``namespace/name``), its need and its namespace's policy, the candidates, and how it came
    (``enforce_entry``: through the entry whose Error the scheduler does not ignore; ``reach``: the
    nodes it may use). ``sizes``: the sizes decided on, in the decision's order (none: passed through)."""

    uid: str
    namespace: str
    owner: str
    demand: PodDemand
    candidates: Sequence[str]
    policy: Policy
    enforce_entry: bool
    reach: PodReach
    sizes: tuple[str, ...]


def owns(shown_owner: str | None, remembered_owner: str | None, owner: str) -> bool:
    """Whether the pod ``owner`` (``namespace/name``) owns the UID it names: not when the watch
    shows that UID as another pod's (``shown_owner``), nor when an earlier filter remembered it as
    another's (``remembered_owner``) and the watch does not show it as this one's."""
    if shown_owner is not None and shown_owner != owner:
        return False
    return remembered_owner is None or owner in (remembered_owner, shown_owner)


def may_retry_window(decision: FilterDecision, policy: Policy, enforce_entry: bool) -> bool:
    """Whether an Error answer (the scheduler's next window, extender/core/window.py) may replace
    this rejection: only through the enforce entry (an ignorable entry would place the pod
    unchecked), for an enforcing namespace, when every candidate was examined and turned away."""
    return enforce_entry and policy.mode is Mode.ENFORCE and decision.outcome in EVERY_CANDIDATE_REJECTED


def admitted_for_bind(passed: Sequence[str], hold_limit: int) -> tuple[str, ...] | None:
    """The nodes bind may later accept for the pod: those its filter admitted, when at most
    ``hold_limit``; else None ("a node this extender knows": a caller that can call filter could
    have named that node alone, and keeping thousands of names per pod costs memory for nothing)."""
    return tuple(passed) if len(passed) <= hold_limit else None
