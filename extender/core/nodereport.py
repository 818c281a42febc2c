"""A node agent's record as the extender reads it: the ``HugepageNodeReport`` API object, and
``read_report``, which keeps only what placement needs and refuses what no machine could say.

The shape is the node agent's (``extender.core.nodeagent.record`` builds it); this side is the
extender's core, so placement reads records without importing the agent's package.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import msgspec

GROUP = "hugepage-extender.io"
VERSION = "v1alpha1"
KIND = "HugepageNodeReport"
PLURAL = "hugepagenodereports"
API_VERSION = f"{GROUP}/{VERSION}"
MAX_POOL_BYTES = 1 << 50  # 1 PiB of hugepages on one node: beyond any machine
MAX_NUMA_NODES = 1024  # the kernel's own limit (CONFIG_NODES_SHIFT <= 10)
MAX_PAGES = 1 << 40  # more pages than any machine has: a counter above it is not a counter
SOURCE_NONE = "none"  # a record that names no source says nothing of the pods' pages


class ReportError(ValueError):
    """A record the extender will not use; the message says why (for a log line), the
    ``reason`` is a bounded metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


Count = int | None


class _Figures(msgspec.Struct, rename="camel"):
    total_pages: int
    free_pages: int
    surplus_pages: int = 0
    reserved_pages: Count = None
    pod_pages: Count = None
    outside_pages: Count = None


class _Size(_Figures, rename="camel"):
    numa: dict[str, _Figures] = {}


class _Report(msgspec.Struct, rename="camel"):
    observed_at: str
    source: str = SOURCE_NONE
    page_sizes: dict[str, _Size] = {}


class _Meta(msgspec.Struct):
    name: str = ""


class ReportObject(msgspec.Struct):
    """A HugepageNodeReport as listed or watched: the name, and the report left raw so that a
    malformed one costs one object, not the list it came in."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    report: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))

    @property
    def report_bytes(self) -> bytes | None:
        raw = bytes(self.report)
        return None if raw in (b"", b"null") else raw


@dataclass(frozen=True, slots=True)
class PoolReport:
    """What placement reads of one node's record, for the configured page size."""

    observed_at: float  # seconds since the epoch
    source: str
    total_pages: int  # the kernel's persistent pool (caps allocatable)
    outside_pages: int | None  # None: the agent could not tell pods' pages apart
    pod_pages: int | None  # the pages pods hold, as the kernel charges them
    reserved_pages: int  # the kernel's global reservations, not yet faulted
    numa_free_pages: tuple[int, ...]  # free pages per NUMA node (empty: no NUMA figures)


_decode_report = msgspec.json.Decoder(_Report)


def _check(value: int | None, what: str, limit: int) -> None:
    if value is not None and not 0 <= value <= limit:
        raise ReportError("absurd", f"{what} = {value} is not between 0 and {limit}")


def read_report(raw: bytes, resource_name: str, page_size: int) -> PoolReport | None:
    """The configured page size's figures from a record's ``report``; None when it has no such
    page size (the node has no pool of it). ReportError for malformed or absurd records."""
    try:
        report = _decode_report.decode(raw)
    except msgspec.DecodeError as error:  # ValidationError is a DecodeError
        raise ReportError("malformed", f"malformed report: {error}") from None
    try:
        observed = dt.datetime.fromisoformat(report.observed_at)
    except ValueError:
        raise ReportError("malformed", f"observedAt {report.observed_at[:40]!r} is not RFC 3339") from None
    if observed.tzinfo is None:
        raise ReportError("malformed", "observedAt has no time zone")
    size = report.page_sizes.get(resource_name)
    if size is None:
        return None
    limit = min(MAX_PAGES, MAX_POOL_BYTES // page_size)
    pool = size.total_pages + size.surplus_pages
    _check(size.total_pages, "totalPages", limit)
    _check(size.surplus_pages, "surplusPages", limit)
    for what, value in (
        ("freePages", size.free_pages),
        ("reservedPages", size.reserved_pages),
        ("podPages", size.pod_pages),
        ("outsidePages", size.outside_pages),
    ):
        _check(value, what, pool)
    if len(size.numa) > MAX_NUMA_NODES:
        raise ReportError("absurd", f"{len(size.numa)} NUMA nodes")
    numa_free = []
    for node, figures in sorted(size.numa.items()):
        _check(figures.total_pages, f"numa {node} totalPages", pool)
        _check(figures.free_pages, f"numa {node} freePages", figures.total_pages + figures.surplus_pages)
        numa_free.append(figures.free_pages)
    if numa_free and sum(numa_free) > pool:
        raise ReportError("absurd", f"free pages of the NUMA nodes ({sum(numa_free)}) exceed the pool ({pool})")
    return PoolReport(
        observed_at=observed.timestamp(),
        source=report.source,
        total_pages=size.total_pages,
        outside_pages=size.outside_pages,
        pod_pages=size.pod_pages,
        reserved_pages=size.reserved_pages or 0,
        numa_free_pages=tuple(numa_free),
    )


MAX_REPORT_BYTES = 64 * 1024  # a record is a few hundred bytes per page size; anything this big is not one
ReportRecord = tuple[str, PoolReport | None, ReportError | None]


def report_record(name: str, raw: bytes | None, resource_name: str, page_size: int) -> ReportRecord:
    """(node, figures or None, error or None) of one object's ``report``, never raising: what the
    cluster state takes (``ClusterState.apply_report``)."""
    if raw is None:
        return name, None, ReportError("malformed", "no report")
    if len(raw) > MAX_REPORT_BYTES:
        return name, None, ReportError("huge", f"report of {len(raw)} bytes")
    try:
        return name, read_report(raw, resource_name, page_size), None
    except ReportError as error:
        return name, None, error
