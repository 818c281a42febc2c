"""Node load for one request, and the extender priority derived from it.

The reference engine's score (docs: shared best-of-k-scoring): lower load is a
better node. Hugepage load uses the same counters as ``capacity.fits``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from extender.core.capacity import NodeAccount, hugepages_for
from extender.core.columns import NodeColumns
from extender.core.podrequest import SizeNeed
from extender.core.policy import Policy

MAX_PRIORITY = 10  # extenderv1.MaxExtenderPriority
NO_POOL_LOAD = 0.5  # a node without a pool, or unknown to the extender: neither free nor full


def cpu_load(account: NodeAccount, demand: SizeNeed, overcommit_ratio: float) -> float:
    """(requested + allocated + pending) / (R * cpus); a node with 0 CPUs is never preferred."""
    if account.cpu_millis <= 0:
        return math.inf
    busy = demand.cpu_millis + account.cpu_requested_millis + account.held_cpu_millis
    return busy / (overcommit_ratio * account.cpu_millis)


def hugepage_load(account: NodeAccount, demand: SizeNeed, alpha: float) -> float:
    """memoryScore: (request + committed + pending + alpha * used) / pool, in bytes.

    No over-commit factor: the pool is physical, so the load can exceed 1.
    The request and the in-flight bytes are counted in whole pages, as
    ``fits`` counts them, so that with alpha = 0 a load <= 1 is exactly
    ``fits``: ranking and admission never disagree (the reference's cases are
    whole pages, so its values are unchanged).
    """
    if not account.has_pool:
        return NO_POOL_LOAD
    page = account.page_size
    load_pages = (
        hugepages_for(demand.hugepage_bytes, page)
        + account.committed_pages
        + account.held_pages
        + alpha * account.used_pages
    )
    return load_pages / account.total_pages


def node_load(account: NodeAccount, demand: SizeNeed, policy: Policy) -> float:
    cpu = cpu_load(account, demand, policy.overcommit_ratio)
    if not policy.score_hugepages:
        return cpu
    return max(cpu, hugepage_load(account, demand, policy.alpha))


def priorities(
    demand: SizeNeed, slots: npt.NDArray[np.intp], columns: NodeColumns, policy: Policy
) -> npt.NDArray[np.int64]:
    """``priority(node_load(...))`` for many nodes at once, with the same arithmetic in
    the same order, so every score equals the scalar one (a property test holds them equal)."""
    return priorities_of(loads(demand, slots, columns, policy))


def priorities_of(load: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """``priority`` of many loads at once."""
    return np.floor(MAX_PRIORITY * (1.0 - np.minimum(load, 1.0)) + 0.5).astype(np.int64)


def loads(
    demand: SizeNeed, slots: npt.NDArray[np.intp], columns: NodeColumns, policy: Policy
) -> npt.NDArray[np.float64]:
    """``node_load(...)`` for many nodes at once, with the same arithmetic in the same order."""
    page = columns.column("page_size")[slots]
    total = columns.column("total_pages")[slots]
    cpus = columns.column("cpu_millis")[slots]
    busy = demand.cpu_millis + columns.column("cpu_busy_millis")[slots]
    with np.errstate(divide="ignore", invalid="ignore"):
        load = np.where(cpus > 0, busy / (policy.overcommit_ratio * cpus), math.inf)
        if policy.score_hugepages:
            need_pages = np.where(page > 0, -(-demand.hugepage_bytes // np.maximum(page, 1)), 0)
            load_pages = (
                need_pages
                + columns.column("committed_pages")[slots]
                + columns.column("held_pages")[slots]
                + policy.alpha * columns.column("used_pages")[slots]
            )
            has_pool = (total > 0) & (page > 0)
            memory = np.where(has_pool, load_pages / np.where(has_pool, total, 1), NO_POOL_LOAD)
            load = np.maximum(load, memory)
    result: npt.NDArray[np.float64] = load
    return result


def priority(load: float) -> int:
    """round(10 * (1 - min(load, 1))), halves rounded up as Go's math.Round does."""
    return math.floor(MAX_PRIORITY * (1.0 - min(load, 1.0)) + 0.5)
