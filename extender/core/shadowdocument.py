"""Shadow's scorecard as ``/debug/shadow`` answers it, read back and printed (``kubectl hugepages shadow``).

The table: per namespace, the four cells over the window (and since the extender started), precision
and recall; then the last pods of each cell, each with what shadow said of its node and what became of it
(and the pod it was paired with, extender.state.scorecard).
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from extender.core.errors import ExtenderError
from extender.core.podoutcome import CELLS

_TITLES = {
    "predicted_failed": "predicted, failed",
    "predicted_ran": "predicted, ran (false alarm)",
    "failed_unpredicted": "failed, not predicted (miss)",
    "ran_as_predicted": "ran as predicted",
}


# Why a paired pod is in its cell (extender.state.scorecard): the pair is one foreseen failure on the node.
_PAIRED = {
    "predicted_failed": "shadow judged the node over-committed, a pod past its room ran in this one's stead",
    "ran_as_predicted": "shadow named this pod past the node's room, another failed in its stead",
}


class ShadowDocumentError(ExtenderError):
    """An answer that is not a scorecard."""


class PodStory(msgspec.Struct, rename="camel", frozen=True):
    """One pod of a cell: what shadow said of its node, and what became of it (the scorecard keeps the
    last few of each cell; ``/debug/shadow`` gives them, camelCase)."""

    pod: str
    node: str
    verdict: str
    outcome: str
    judged_by: str
    seconds_to_outcome: float
    # The pod of the same node and burst it was paired with (extender.state.scorecard): the false alarm whose
    # node the failure proved full, or the miss that failed in this one's stead. "" when not paired.
    paired_with: str = ""


class Row(msgspec.Struct, frozen=True):
    window: dict[str, int]
    total: dict[str, int]
    precision: float | None
    recall: float | None
    awaiting: int
    pods: dict[str, list[PodStory]]


class ShadowDocument(msgspec.Struct, rename="camel", frozen=True):
    settle_seconds: float
    window_seconds: float
    pair_seconds: float
    followed: int
    namespaces: dict[str, Row]


def parse_shadow_document(body: bytes) -> ShadowDocument:
    try:
        return msgspec.json.decode(body, type=ShadowDocument)
    except msgspec.DecodeError as error:
        raise ShadowDocumentError(f"not a shadow scorecard: {error}") from None


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _table_lines(document: ShadowDocument) -> Iterator[str]:
    head = ("NAMESPACE", *(c.upper() for c in CELLS), "DELETED", "EXPIRED", "PRECISION", "RECALL", "AWAITING")
    rows = [head]
    for name, row in document.namespaces.items():
        counts = [str(row.window.get(end, 0)) for end in (*CELLS, "deleted", "expired")]
        rows.append((name, *counts, _share(row.precision), _share(row.recall), str(row.awaiting)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        yield "  ".join(value.ljust(width) for value, width in zip(r, widths, strict=True)).rstrip()


def render_shadow(document: ShadowDocument) -> str:
    """The table over the window, then the pods behind each cell (the last few, newest first)."""
    minutes = document.window_seconds / 60
    lines = [
        f"Shadow's scorecard over the last {minutes:g} min (a pod ran once Ready for {document.settle_seconds:g} s);"
        f" a false alarm and a miss on one node judged within {document.pair_seconds:g} s pair up as a foreseen"
        f" failure; {document.followed} pods awaiting their outcome or a partner.",
        "",
        *_table_lines(document),
    ]
    if not document.namespaces:
        lines.append("(no namespace in shadow mode)")
    for name, row in document.namespaces.items():
        for cell in CELLS:
            stories = row.pods.get(cell, [])
            if not stories:
                continue
            lines += ["", f"{name}: {_TITLES[cell]} ({row.total.get(cell, 0)} since the extender started)"]
            for story in stories:
                lines.append(f"  {story.pod} on {story.node}: shadow said {story.verdict} ({story.judged_by});")
                lines.append(f"    {story.outcome} ({story.seconds_to_outcome:g} s after the verdict)")
                if story.paired_with:
                    lines.append(f"    paired with {story.paired_with} (same node and burst: {_PAIRED[cell]})")
    return "\n".join(lines)
