"""The one capacity test, shared by the filter and the score.

A node's hugepage pool is counted in pages, as the kernel counts it. ``fits``
is the RFC's ``nodeHasCapacity``: the pool total minus what is committed
(pages requested by pods on the node plus pages held outside pods) must leave
room for the request plus every placement still in flight to that node.

Unlike the RFC, a node whose pool is absent or zero holds no hugepages: the kubelet
always reports its pools, so zero is known to be empty (unresolvable: no pod leaving
adds a pool). Only a node the extender does not know at all is left alone.
"""

from __future__ import annotations

from enum import Enum

import msgspec


def hugepages_for(nbytes: int, page_size: int) -> int:
    """Pages needed to hold ``nbytes``: ceil(nbytes / page_size), 0 with no page size."""
    if page_size <= 0:
        return 0
    return -(-nbytes // page_size)


class NodeAccount(msgspec.Struct, frozen=True, gc=False):
    """Everything a decision knows about one node, for the configured page size.

    A frozen msgspec Struct rather than a frozen dataclass: the state builds one per
    node on every change that touches it (a hold, a pod), and a Struct is built in a
    tenth of the time; its fields are all integers, so the cyclic GC can skip it.
    """

    page_size: int = 0  # bytes per page; 0 means the extender does not know the node
    total_pages: int = 0  # status.allocatable[<resource>] / page_size, capped by the kernel's own total
    used_pages: int = 0  # requested by non-terminal pods bound to the node
    outside_pods_pages: int = 0  # held outside pod requests (VMs, DPDK), reported by the node
    held_bytes: int = 0  # placements chosen but not yet seen bound
    cpu_millis: int = 0  # status.allocatable.cpu
    cpu_requested_millis: int = 0  # requested by pods bound to the node
    held_cpu_millis: int = 0  # requested by placements in flight
    numa_free_pages: int = -1  # pages the best NUMA node can still give; -1: not reported

    @property
    def known(self) -> bool:
        return self.page_size > 0

    @property
    def has_pool(self) -> bool:
        return self.total_pages > 0 and self.page_size > 0

    @property
    def committed_pages(self) -> int:
        return self.used_pages + self.outside_pods_pages

    @property
    def held_pages(self) -> int:
        return hugepages_for(self.held_bytes, self.page_size)

    @property
    def free_pages(self) -> int:
        """Pages left for a new pod: never negative, 0 with no pool."""
        if not self.has_pool:
            return 0
        return max(0, self.total_pages - self.committed_pages - self.held_pages)


UNKNOWN_ACCOUNT = NodeAccount()  # a node the extender does not know (page_size 0): Fit.UNKNOWN


class Fit(Enum):
    UNKNOWN = "unknown node"  # not in the extender's cache (yet): left to the scheduler
    FITS = "fits"
    INSUFFICIENT = "insufficient"  # the pool is in use; it may free up (pods leave, holds end)
    NUMA_INSUFFICIENT = "no NUMA node fits"  # numaAligned: no single NUMA node has the pages free
    NO_POOL = "no pool"  # the node has no pool of this size, or an empty one: unresolvable
    EXCEEDS_POOL = "exceeds pool"  # the request is larger than the whole pool: unresolvable
    HELD_OUTSIDE = "held outside pods"  # larger than what pages held outside pods leave: unresolvable

    @property
    def admits(self) -> bool:
        return self is Fit.FITS or self is Fit.UNKNOWN

    @property
    def unresolvable(self) -> bool:
        """No pod leaving the node would make room: no pod on it holds what is missing."""
        return self in _UNRESOLVABLE


_UNRESOLVABLE = frozenset({Fit.NO_POOL, Fit.EXCEEDS_POOL, Fit.HELD_OUTSIDE})
UNBOUNDED = 1 << 62  # the headroom of a node the extender does not know: anything fits


def headroom_bytes(account: NodeAccount) -> int:
    """The largest request ``fits`` admits, in bytes (whole pages): one integer
    comparison per node for the filter's hot loop, equal to ``fits(...).admits``
    for every request of at least one byte."""
    # The properties (known, has_pool, committed_pages, held_pages) spelt out: this runs for every
    # node a hold, a pod or a record changes, and each property is a Python call.
    page = account.page_size
    if page <= 0:
        return UNBOUNDED
    total = account.total_pages
    committed = account.used_pages + account.outside_pods_pages
    if total <= 0 or committed >= total:
        return -1
    return (total - committed + account.held_bytes // -page) * page  # held pages: -(held // -page)


def ceiling_bytes(account: NodeAccount) -> int:
    """The largest request the node could ever hold, in bytes (whole pages): a larger one is
    unresolvable (no pool, the whole pool too small, or what pages held outside pods leave);
    equal to ``fits(...).unresolvable`` for every request of at least one byte."""
    page = account.page_size
    if page <= 0:
        return UNBOUNDED
    total = account.total_pages
    if total <= 0:
        return -1
    return max(-1, (total - account.outside_pods_pages) * page)


def numa_headroom_bytes(account: NodeAccount) -> int:
    """The largest request one NUMA node can take (numaAligned), UNBOUNDED when not reported."""
    if account.numa_free_pages < 0 or not account.known:
        return UNBOUNDED
    return (account.numa_free_pages - account.held_pages) * account.page_size


def _never_fits(account: NodeAccount, need_pages: int) -> Fit | None:
    """Why no pod leaving this node could make room, if none could."""
    if not account.has_pool:
        return Fit.NO_POOL
    if need_pages > account.total_pages:
        return Fit.EXCEEDS_POOL
    if need_pages > account.total_pages - account.outside_pods_pages:
        return Fit.HELD_OUTSIDE
    return None


def fits(account: NodeAccount, need_bytes: int, *, numa_aligned: bool = False) -> Fit:
    """Whether the node's pool can hold ``need_bytes`` on top of what it carries;
    with ``numa_aligned``, also within one NUMA node's free pages when the node reports them."""
    if not account.known:
        return Fit.UNKNOWN
    need_pages = hugepages_for(need_bytes, account.page_size)
    if (never := _never_fits(account, need_pages)) is not None:
        return never
    committed = account.committed_pages
    if committed >= account.total_pages or account.total_pages - committed < need_pages + account.held_pages:
        return Fit.INSUFFICIENT
    if numa_aligned and 0 <= account.numa_free_pages < need_pages + account.held_pages:
        return Fit.NUMA_INSUFFICIENT
    return Fit.FITS
