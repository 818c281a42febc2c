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

from dataclasses import dataclass
from decimal import Decimal

from extender.objects import Container, Pod, PodSpec, ResourceList, ResourceRequirements
from extender.quantity import INT64_MAX, QuantityError, ceil_millis, ceil_units, parse

_ZERO = Decimal(0)
_FIRST = (0,)


@dataclass(frozen=True, slots=True)
class PodDemand:
    """The hugepage bytes and CPU a pod needs on the node it lands on.

    ``hugepage_bytes`` is of the first size the extender guards (``Config.resource_names``),
    ``more_bytes`` of each further one, in order: empty in a one-size cluster, which thus pays
    nothing for the others."""

    hugepage_bytes: int
    cpu_millis: int
    guaranteed: bool = False  # Guaranteed QoS: what a single-numa-node Topology Manager pins to one NUMA node
    more_bytes: tuple[int, ...] = ()

    @property
    def wants_hugepages(self) -> bool:
        return self.hugepage_bytes > 0 or (bool(self.more_bytes) and any(self.more_bytes))

    @property
    def sizes_needed(self) -> tuple[int, ...]:
        """The sizes (indices into ``Config.resource_names``) the pod asks pages of."""
        if not self.more_bytes:
            return _FIRST if self.hugepage_bytes > 0 else ()
        return tuple(index for index, need in enumerate((self.hugepage_bytes, *self.more_bytes)) if need > 0)

    def of_size(self, index: int) -> PodDemand:
        """The pod's need of one size, with its CPU: what that size's accounts judge."""
        if index == 0:
            return PodDemand(self.hugepage_bytes, self.cpu_millis, self.guaranteed) if self.more_bytes else self
        need = self.more_bytes[index - 1] if index <= len(self.more_bytes) else 0
        return PodDemand(need, self.cpu_millis, self.guaranteed)


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
    resource_name: str,
    *,
    need_from_memory: bool,
    memory_runtime_class: str = "",
    with_qos: bool = False,
    more_resources: tuple[str, ...] = (),
    memory_index: int = 0,
) -> PodDemand:
    """The pod's need for ``resource_name`` (e.g. ``hugepages-2Mi``), each of ``more_resources``, and CPU.

    With ``need_from_memory`` (VM-backed pods whose guest RAM is backed by
    hugepages), a pod that requests no hugepages of any size needs its memory request
    in hugepages instead, of the size ``memory_index`` names (0: ``resource_name``); with
    ``memory_runtime_class``, only a pod of that RuntimeClass does (the others are not VMs).
    ``with_qos``: also tell whether the pod is Guaranteed (numaAligned namespaces).
    """
    hugepage_bytes = ceil_units(effective_request(pod.spec, resource_name))
    more_bytes = tuple([ceil_units(effective_request(pod.spec, name)) for name in more_resources])
    counts_memory = need_from_memory and (
        not memory_runtime_class or pod.spec.runtime_class_name == memory_runtime_class
    )
    if counts_memory and hugepage_bytes == 0 and not any(more_bytes):
        memory = ceil_units(effective_request(pod.spec, "memory"))
        if memory_index == 0:
            hugepage_bytes = memory
        else:
            more_bytes = tuple(memory if i == memory_index - 1 else 0 for i in range(len(more_bytes)))
    cpu_millis = ceil_millis(effective_request(pod.spec, "cpu"))
    if hugepage_bytes > INT64_MAX or (more_bytes and max(more_bytes) > INT64_MAX) or cpu_millis > INT64_MAX * 1000:
        # Each quantity is bounded; a sum of many may still exceed anything a node offers.
        raise QuantityError("the pod's requests add up to more than any node can hold (over 2^63-1)")
    return PodDemand(
        hugepage_bytes=hugepage_bytes,
        cpu_millis=cpu_millis,
        guaranteed=with_qos and _guaranteed(pod.spec),
        more_bytes=more_bytes,
    )
