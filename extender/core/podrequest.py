"""What a pod asks of a node: Kubernetes' effective request rule.

Mirrors ``resource.PodRequests`` in k8s.io/component-helpers:
app containers are summed; restartable init containers (sidecars, with
``restartPolicy: Always``) are added to that sum and stay running while later
init containers run; the pod needs at least the peak of any init container
plus the sidecars started before it; pod-level ``spec.resources`` replaces
the container total where set; ``spec.overhead`` is added last. A limit stands
in for an absent request, as API defaulting does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

from extender.core.objects import Container, Pod, PodSpec, ResourceList, ResourceRequirements
from extender.core.quantity import INT64_MAX, QuantityError, ceil_millis, ceil_units, parse

_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class PodDemand:
    """The hugepage bytes of each size and the CPU a pod needs on the node it lands on.

    ``bytes_by_size`` maps a resource name (``Config.resource_names``) to the bytes the pod asks of
    it, in the config's order: a size the pod asks nothing of may be absent."""

    bytes_by_size: Mapping[str, int]
    cpu_millis: int
    guaranteed: bool = False  # Guaranteed QoS: what a single-numa-node Topology Manager pins to one NUMA node

    @property
    def wants_hugepages(self) -> bool:
        return any(need > 0 for need in self.bytes_by_size.values())

    @property
    def sizes_needed(self) -> tuple[str, ...]:
        """The sizes (resource names) the pod asks pages of, in the config's order."""
        return tuple(name for name, need in self.bytes_by_size.items() if need > 0)

    def bytes_of(self, resource_name: str) -> int:
        return self.bytes_by_size.get(resource_name, 0)

    def of_one(self, resource_name: str) -> SizeNeed:
        """The pod's need of one size, with its CPU: what that size's accounts judge."""
        return SizeNeed(self.bytes_by_size.get(resource_name, 0), self.cpu_millis)


class SizeNeed(NamedTuple):
    """A pod's bytes of one page size and its CPU: what one size's accounts and scores judge."""

    hugepage_bytes: int
    cpu_millis: int


def _declared(resources: ResourceRequirements | None, name: str) -> Decimal | None:
    if resources is None:
        return None
    for source in (resources.requests, resources.limits):
        if source is not None and name in source:
            return parse(source[name])
    return None


def _container_request(container: Container, name: str) -> Decimal:
    return _declared(container.resources, name) or _ZERO


def _from_list(resources: ResourceList | None, name: str) -> Decimal:
    if resources is None or name not in resources:
        return _ZERO
    return parse(resources[name])


def effective_request(spec: PodSpec, name: str) -> Decimal:
    """The pod's request for one resource, as the scheduler computes it."""
    total = sum((_container_request(c, name) for c in spec.containers), _ZERO)
    sidecars = _ZERO
    init_peak = _ZERO
    for container in spec.init_containers or ():
        request = _container_request(container, name)
        if container.restart_policy == "Always":
            total += request
            sidecars += request
            running = sidecars
        else:
            running = request + sidecars
        init_peak = max(init_peak, running)
    total = max(total, init_peak)
    pod_level = _declared(spec.resources, name)
    if pod_level is not None:
        total = pod_level
    return total + _from_list(spec.overhead, name)


def _guaranteed(spec: PodSpec) -> bool:
    """Guaranteed QoS (k8s.io/kubernetes pkg/apis/core/v1/helper/qos): every container sets cpu and
    memory limits, and its requests (defaulted to the limits) equal them."""
    containers = [*spec.containers, *(spec.init_containers or ())]
    if not containers:
        return False
    for container in containers:
        resources = container.resources
        limits = (resources.limits if resources is not None else None) or {}
        requests = (resources.requests if resources is not None else None) or {}
        for name in ("cpu", "memory"):
            if name not in limits:
                return False
            if name in requests and parse(requests[name]) != parse(limits[name]):
                return False
    return True


def pod_demand(
    pod: Pod,
    resource_names: Sequence[str],
    *,
    need_from_memory: bool,
    memory_runtime_class: str = "",
    with_qos: bool = False,
    memory_resource: str = "",
) -> PodDemand:
    """The pod's need for each of ``resource_names`` (e.g. ``hugepages-2Mi``), and its CPU.

    With ``need_from_memory`` (VM-backed pods whose guest RAM is backed by
    hugepages), a pod that requests no hugepages of any size needs its memory request
    in hugepages instead, of the size ``memory_resource`` names (default: the first of
    ``resource_names``); with ``memory_runtime_class``, only a pod of that RuntimeClass does
    (the others are not VMs). ``with_qos``: also tell whether the pod is Guaranteed (numaAligned namespaces).
    """
    bytes_by_size = {name: ceil_units(effective_request(pod.spec, name)) for name in resource_names}
    counts_memory = need_from_memory and (
        not memory_runtime_class or pod.spec.runtime_class_name == memory_runtime_class
    )
    if counts_memory and not any(bytes_by_size.values()):
        bytes_by_size[memory_resource or resource_names[0]] = ceil_units(effective_request(pod.spec, "memory"))
    cpu_millis = ceil_millis(effective_request(pod.spec, "cpu"))
    _check_bounded(bytes_by_size.values(), cpu_millis)
    return PodDemand(bytes_by_size, cpu_millis, with_qos and _guaranteed(pod.spec))


def _check_bounded(hugepage_bytes: Iterable[int], cpu_millis: int) -> None:
    # Each quantity is bounded; a sum of many may still exceed anything a node offers.
    if max(hugepage_bytes, default=0) > INT64_MAX or cpu_millis > INT64_MAX * 1000:
        raise QuantityError("the pod's requests add up to more than any node can hold (over 2^63-1)")
