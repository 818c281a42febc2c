"""The record one node publishes, as the agent builds it.

The agent's ``--once --output json`` prints ``NodeRecord.as_json()``; the API object
is a cluster-scoped ``HugepageNodeReport`` named after the node whose ``report`` is
the same document without ``node``. The extender reads it with
``extender.core.nodereport.read_report``, which keeps only what placement needs and
refuses what no machine could say.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from extender.core.nodeagent.counters import SizeReport, Source
from extender.core.nodereport import API_VERSION, KIND


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node: str
    observed_at: dt.datetime
    source: Source
    size_reports: Mapping[str, SizeReport]  # one per page size, by resource name: hugepages-2Mi, hugepages-1Gi

    def report_json(self) -> dict[str, object]:
        return {
            "observedAt": rfc3339(self.observed_at),
            "source": self.source.value,
            "pageSizes": {name: size.as_json() for name, size in sorted(self.size_reports.items())},
        }

    def as_json(self) -> dict[str, object]:
        """The ``--once --output json`` contract (README)."""
        return {"node": self.node, **self.report_json()}

    def change_key(self) -> tuple[object, ...]:
        """The figures the extender reads; a record is written again when one changes.
        Free pages of the whole machine move with every pod that starts and are not read."""
        return tuple(
            (
                name,
                size.figures.total_pages,
                size.figures.outside_pages,
                tuple((n, f.total_pages, f.free_pages, f.outside_pages) for n, f in sorted(size.numa.items())),
            )
            for name, size in sorted(self.size_reports.items())
        )

    def api_object(self) -> dict[str, object]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.node},
            "report": self.report_json(),
        }
