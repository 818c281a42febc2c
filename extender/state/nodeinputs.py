"""A node's own inputs to its account: the pool and CPU its status reports, and the pages the manual
annotation (``hugepage-extender.io/reserved-<resource>``) says are held outside pods.

Anyone who may annotate Nodes can write the annotation: it is read defensively, and an
unreadable or absurd value is ignored, logged and counted, never stopping the state from loading.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal

import msgspec

from extender.core.capacity import hugepages_for
from extender.core.nodereport import MAX_POOL_BYTES
from extender.core.objects import Node
from extender.core.quantity import QuantityError, QuantityTooLarge, ceil_units, parse, quote, to_millis, to_units
from extender.core.reach import NodeReach

log = logging.getLogger("extender.state.cluster")

RESERVED_ANNOTATION_PREFIX = "hugepage-extender.io/reserved-"


# Holds only integers and a short string, so it can form no reference cycle: gc=False keeps
# thousands of nodes' records out of every garbage collection.
class SizePool(msgspec.Struct, frozen=True, gc=False):
    """A Node's pool of one page size, as its status and the manual annotation give it."""

    total_pages: int
    outside_pods_pages: int  # from the manual annotation
    annotated: bool = False  # the annotation is set (and readable): it overrides the agent's record
    ignored: str = ""  # why the annotation was not read ("malformed", "absurd"), for the metric


class NodeCapacity(msgspec.Struct, frozen=True, gc=False):
    """A Node's inputs to its accounts: its pool of each size guarded (by resource name), its CPU,
    and which pods may use it."""

    pools: dict[str, SizePool]
    cpu_millis: int
    reach: NodeReach | None = None


def node_capacity(node: Node, pages: Mapping[str, int], reach: NodeReach | None = None) -> NodeCapacity:
    """A Node as the accounts read it, for each size guarded (``pages``: resource name -> page size)."""
    cpu_millis = to_millis((node.status.allocatable or {}).get("cpu", 0))
    return NodeCapacity({name: size_pool(node, name, page) for name, page in pages.items()}, cpu_millis, reach)


def size_pool(node: Node, resource_name: str, page_size: int) -> SizePool:
    """A Node's pool of one size in pages, and the pages the manual annotation holds outside pods.
    An unreadable or absurd annotation is ignored and logged, and says why."""
    pool_bytes = to_units((node.status.allocatable or {}).get(resource_name, 0))
    reserved_annotation = RESERVED_ANNOTATION_PREFIX + resource_name
    raw = (node.metadata.annotations or {}).get(reserved_annotation)
    if raw is None:
        return SizePool(pool_bytes // page_size, 0)
    # Anyone who may annotate Nodes can write here: read it defensively, never
    # letting "NaN" or "1e999999" (a million-digit integer) near the arithmetic.
    try:
        value = parse(raw)
        if not Decimal(0) <= value <= MAX_POOL_BYTES:
            raise QuantityTooLarge(f"{quote(raw)} is more than any node holds")
        reserved_pages = hugepages_for(ceil_units(value), page_size)
    except (QuantityError, ArithmeticError, ValueError) as error:
        reason = "absurd" if isinstance(error, QuantityTooLarge) else "malformed"
        log.warning("node %s: annotation %s ignored (%s)", quote(node.metadata.name), reserved_annotation, error)
        return SizePool(pool_bytes // page_size, 0, ignored=reason)
    return SizePool(pool_bytes // page_size, reserved_pages, annotated=True)
