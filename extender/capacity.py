"""The one capacity test, shared by the filter and the score.

A node's hugepage pool is counted in pages, as the kernel counts it. ``fits``
is the RFC's ``nodeHasCapacity``: the pool total minus what is committed
(pages requested by pods on the node plus pages held outside pods) must leave
room for the request plus every placement still in flight to that node.
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

    page_size: int = 0  # bytes per page; 0 means the node reports no pool
    total_pages: int = 0  # status.allocatable[<resource>] / page_size
    used_pages: int = 0  # requested by non-terminal pods bound to the node
    reserved_pages: int = 0  # held outside pod requests (VMs, DPDK), reported by the node
    pending_bytes: int = 0  # placements chosen but not yet seen bound
    cpu_millis: int = 0  # status.allocatable.cpu
    cpu_requested_millis: int = 0  # requested by pods bound to the node
    pending_cpu_millis: int = 0  # requested by placements in flight

    @property
    def has_pool(self) -> bool:
        return self.total_pages > 0 and self.page_size > 0

    @property
    def committed_pages(self) -> int:
        return self.used_pages + self.reserved_pages

    @property
    def pending_pages(self) -> int:
        return hugepages_for(self.pending_bytes, self.page_size)

    @property
    def free_pages(self) -> int:
        """Pages left for a new pod: never negative, 0 with no pool."""
        if not self.has_pool:
            return 0
        return max(0, self.total_pages - self.committed_pages - self.pending_pages)


NO_POOL_ACCOUNT = NodeAccount()


class Fit(Enum):
    NO_POOL = "no pool"  # unknown capacity: left to the score, never blocked
    FITS = "fits"
    INSUFFICIENT = "insufficient"  # the pool is in use; it may free up (preemption can help)
    EXCEEDS_POOL = "exceeds pool"  # the request is larger than the whole pool

    @property
    def admits(self) -> bool:
        return self is Fit.FITS or self is Fit.NO_POOL


UNBOUNDED = 1 << 62  # the headroom of a node without a pool: anything fits


def headroom_bytes(account: NodeAccount) -> int:
    """The largest request ``fits`` admits, in bytes (whole pages): one integer
    comparison per node for the filter's hot loop, equal to ``fits(...).admits``."""
    if not account.has_pool:
        return UNBOUNDED
    if account.committed_pages >= account.total_pages:
        return -1
    return (account.total_pages - account.committed_pages - account.pending_pages) * account.page_size


def fits(account: NodeAccount, need_bytes: int) -> Fit:
    """Whether the node's pool can hold ``need_bytes`` on top of what it carries."""
    if not account.has_pool:
        return Fit.NO_POOL
    need_pages = hugepages_for(need_bytes, account.page_size)
    if need_pages > account.total_pages:
        return Fit.EXCEEDS_POOL
    committed = account.committed_pages
    if committed >= account.total_pages:
        return Fit.INSUFFICIENT
    if account.total_pages - committed >= need_pages + account.pending_pages:
        return Fit.FITS
    return Fit.INSUFFICIENT
