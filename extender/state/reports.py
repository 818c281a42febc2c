"""The node agents' records the cluster state keeps, and when each stops counting.

What a node's record changes (docs/design.md, "The node's own count"): while it is
fresher than ``nodeReportMaxAgeSeconds``, the kernel's total caps the pool and its
pages held outside pods are committed; older, or absent, the node is counted from pod
requests alone. A malformed or absurd record is ignored, counted and logged: it never
stops the state from loading. ``ClusterState`` owns one ``NodeReports`` and rebuilds
the accounts of the nodes each change returns.
"""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from extender.core.nodereport import PoolReport, ReportError

log = logging.getLogger("extender.state.cluster")

FUTURE_TOLERANCE_SECONDS = 300.0  # a record from further in the future than this is a broken clock


class ReportState(StrEnum):
    """What a node's agent record means for its accounting now."""

    NONE = "none"  # no record (no agent): requests only
    FRESH = "fresh"  # used: kernel total caps the pool, outside pages committed
    STALE = "stale"  # older than nodeReportMaxAgeSeconds: requests only
    IGNORED = "ignored"  # malformed or absurd: requests only


@dataclass(frozen=True, slots=True)
class ReportView:
    """A node's record as ``explain`` shows it."""

    state: ReportState
    age_seconds: float | None = None
    report: PoolReport | None = None
    reason: str = ""


class NodeReports:
    """Every node's record, which of them are fresh under the defaults' max age, and a heap of the
    moments they go stale. Each change returns the nodes whose accounts it changes."""

    def __init__(self, max_age: float, wall_clock: Callable[[], float], ignored: Counter[tuple[str, str]]) -> None:
        self._max_age = max_age
        self._wall_clock = wall_clock  # records carry wall-clock times (observedAt)
        self._ignored_counts = ignored  # (input kind, reason) -> times seen, shared with the node inputs
        self._reports: dict[str, PoolReport] = {}
        self._fresh: set[str] = set()  # nodes whose record is fresh under the defaults' max age
        # (stale at, node): at most one entry per node, checked against its newest record when due,
        # so a node whose agent writes often costs no more than one that writes rarely.
        self._report_deadlines: list[tuple[float, str]] = []
        self._scheduled: set[str] = set()  # nodes with an entry in _report_deadlines
        self._ignored_reports: dict[str, str] = {}  # node -> why its record is not used
        self.stale_reports = 0  # records that went stale while used

    def apply(self, name: str, report: PoolReport | None, error: ReportError | None = None) -> set[str]:
        """A node's record: its figures for the configured page size, None when it has none, or the
        error that made it unusable."""
        self.forget(name)
        if error is not None:
            self._ignore_report(name, error.reason, str(error))
        elif report is not None:
            now = self._wall_clock()
            if report.observed_at > now + FUTURE_TOLERANCE_SECONDS:
                self._ignore_report(name, "future", f"observedAt is {report.observed_at - now:.0f} s ahead")
            else:
                self._reports[name] = report
                if now - report.observed_at <= self._max_age:
                    self._fresh.add(name)
                    if name not in self._scheduled:
                        heapq.heappush(self._report_deadlines, (report.observed_at + self._max_age, name))
                        self._scheduled.add(name)
        return {name}

    def replace(self, records: Iterable[tuple[str, PoolReport | None, ReportError | None]]) -> set[str]:
        """A relist of records."""
        touched = set(self._reports) | set(self._ignored_reports)
        self._reports.clear()
        self._fresh.clear()
        self._ignored_reports.clear()
        self._report_deadlines.clear()
        self._scheduled.clear()
        for name, report, error in records:
            touched |= self.apply(name, report, error)
        return touched

    def expire(self) -> set[str]:
        """Records that are now older than the max age stop counting: O(1) when none is due."""
        deadlines = self._report_deadlines
        if not deadlines or deadlines[0][0] > (now := self._wall_clock()):
            return set()
        touched = set()
        while deadlines and deadlines[0][0] <= now:
            _, name = heapq.heappop(deadlines)
            self._scheduled.discard(name)
            report = self._reports.get(name)
            if report is None or name not in self._fresh:
                continue
            stale_at = report.observed_at + self._max_age
            if stale_at > now:  # a newer record came meanwhile: look again when that one is due
                heapq.heappush(deadlines, (stale_at, name))
                self._scheduled.add(name)
                continue
            self._fresh.discard(name)
            self.stale_reports += 1
            touched.add(name)
            log.warning(
                "node %s: agent record is %.0f s old (max %.0f s); counting the node from pod requests only",
                name,
                now - report.observed_at,
                self._max_age,
            )
        return touched

    def forget(self, name: str) -> None:
        self._reports.pop(name, None)
        self._fresh.discard(name)
        self._ignored_reports.pop(name, None)

    def used(self, name: str, *, fresh: bool | None = None) -> PoolReport | None:
        """The record the node's account uses: fresh under the defaults' max age (or ``fresh``), else None."""
        return self._reports.get(name) if (name in self._fresh if fresh is None else fresh) else None

    def reported(self) -> Iterator[str]:
        """Nodes with a record the extender keeps."""
        return iter(self._reports)

    def view(self, name: str, max_age: float | None = None) -> ReportView:
        if (reason := self._ignored_reports.get(name)) is not None:
            return ReportView(ReportState.IGNORED, reason=reason)
        report = self._reports.get(name)
        if report is None:
            return ReportView(ReportState.NONE)
        age = self._wall_clock() - report.observed_at
        fresh = age <= (self._max_age if max_age is None else max_age)
        return ReportView(ReportState.FRESH if fresh else ReportState.STALE, age, report)

    def counts(self, nodes: Collection[str], unstated: int) -> dict[str, int]:
        """Of ``nodes``, how many have a fresh, stale or ignored record; ``unstated`` are the nodes
        whose pages held outside pods nobody states (the caller knows their pools and annotations)."""
        fresh = sum(1 for name in self._fresh if name in nodes)
        reported = sum(1 for name in self._reports if name in nodes)
        ignored = sum(1 for name in self._ignored_reports if name in nodes)
        return {
            ReportState.FRESH: fresh,
            ReportState.STALE: reported - fresh,
            ReportState.IGNORED: ignored,
            ReportState.NONE: unstated,
        }

    def stated(self, name: str) -> bool:
        """The node has a record, used or not."""
        return name in self._reports or name in self._ignored_reports

    def differing(self, max_age: float) -> Iterator[tuple[str, bool]]:
        """(node, fresh) of the records whose freshness under ``max_age`` differs from the defaults'."""
        if max_age == self._max_age:
            return
        now = self._wall_clock()
        for name, report in self._reports.items():
            if (fresh := now - report.observed_at <= max_age) != (name in self._fresh):
                yield name, fresh

    def __bool__(self) -> bool:
        return bool(self._reports)

    def _ignore_report(self, name: str, reason: str, message: str) -> None:
        self._ignored_reports[name] = reason
        self._ignored_counts["report", reason] += 1
        log.warning("node %s: agent record ignored (%s); counting the node from pod requests only", name, message)
