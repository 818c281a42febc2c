"""One node's verdict, as the filter answers it and as ``explain`` shows it, in one shape:
``("admitted", "")``, ``("failed", reason)`` or ``("unresolvable", reason)``; so a test can
hold the two equal node by node (tests/test_explain_agrees.py, e2e/cluster/test_explain_live.py).
The filter answers every rejected node as unresolvable (docs/design.md, "Preemption"), so a
rejection ``explain`` shows is ``("unresolvable", reason)`` whatever its cause.

Ask the filter one node at a time: an answer names its rejected nodes only when it admits none.
"""

from __future__ import annotations

from typing import Any

from extender.core.answer import Reasons
from extender.core.capacity import Fit

Verdict = tuple[str, str]


def of_filter_answer(answer: Any, node: str) -> Verdict:
    """From an ExtenderFilterResult (decoded JSON) for a call that named ``node`` alone."""
    assert not answer.get("Error"), answer
    if node in (answer.get("NodeNames") or []):
        return ("admitted", "")
    if node in (answer.get("FailedAndUnresolvableNodes") or {}):
        return ("unresolvable", answer["FailedAndUnresolvableNodes"][node])
    return ("failed", answer["FailedNodes"][node])


def of_explanation(row: Any, resource_name: str) -> Verdict:
    """From one node of ``explain --output json``."""
    verdict = Fit(row["verdict"])
    if verdict.admits:
        return ("admitted", "")
    reason = Reasons.for_resource(resource_name).of(verdict)
    return ("unresolvable", reason)
