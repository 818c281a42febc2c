"""Kubernetes' effective request rule (component-helpers resource.PodRequests)."""

from typing import Any

import msgspec
import pytest

from extender.core.objects import Pod
from extender.core.podrequest import effective_request, pod_demand

GiB = 1 << 30


def container(name: str, hugepages: str | None = None, *, limit: str | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if hugepages is not None:
        resources["requests"] = {"hugepages-2Mi": hugepages}
    if limit is not None:
        resources["limits"] = {"hugepages-2Mi": limit}
    return {"name": name, "resources": resources, **extra}


def pod(spec: dict[str, Any]) -> Pod:
    return msgspec.convert({"metadata": {"name": "p"}, "spec": spec}, Pod)


@pytest.mark.parametrize(
    ("case", "spec", "expected_gib"),
    [
        ("no containers", {"containers": []}, 0),
        ("app containers add up: 1 + 2", {"containers": [container("a", "1Gi"), container("b", "2Gi")]}, 3),
        ("a limit stands in for an absent request", {"containers": [container("a", limit="2Gi")]}, 2),
        (
            "the request wins over the limit",
            {"containers": [container("a", "1Gi", limit="2Gi")]},
            1,
        ),
        (
            "init container peak wins when larger: max(1, 4)",
            {"containers": [container("a", "1Gi")], "initContainers": [container("i", "4Gi")]},
            4,
        ),
        (
            "init container smaller than the apps: max(3, 2)",
            {"containers": [container("a", "3Gi")], "initContainers": [container("i", "2Gi")]},
            3,
        ),
        (
            "sidecar adds to the apps and runs beside later init containers: max(1 + 1, 1 + 3)",
            {
                "containers": [container("a", "1Gi")],
                "initContainers": [container("s", "1Gi", restartPolicy="Always"), container("i", "3Gi")],
            },
            4,
        ),
        (
            "init container before the sidecar does not see it: max(1 + 2, 2)",
            {
                "containers": [container("a", "1Gi")],
                "initContainers": [container("i", "2Gi"), container("s", "2Gi", restartPolicy="Always")],
            },
            3,
        ),
        (
            "overhead is added last: 2 + 1",
            {"containers": [container("a", "2Gi")], "overhead": {"hugepages-2Mi": "1Gi"}},
            3,
        ),
        (
            "pod-level resources replace the container total, then overhead: 5 + 1",
            {
                "containers": [container("a", "2Gi")],
                "resources": {"requests": {"hugepages-2Mi": "5Gi"}},
                "overhead": {"hugepages-2Mi": "1Gi"},
            },
            6,
        ),
    ],
)
def test_effective_request(case: str, spec: dict[str, Any], expected_gib: int) -> None:
    assert effective_request(pod(spec).spec, "hugepages-2Mi") == expected_gib * GiB, case


def test_other_page_sizes_are_their_own_resource() -> None:
    p = msgspec.convert(
        {"spec": {"containers": [{"resources": {"requests": {"hugepages-1Gi": "3Gi", "hugepages-2Mi": "2Mi"}}}]}}, Pod
    )
    assert pod_demand(p, ("hugepages-1Gi",), need_from_memory=False).bytes_of("hugepages-1Gi") == 3 * GiB
    assert pod_demand(p, ("hugepages-2Mi",), need_from_memory=False).bytes_of("hugepages-2Mi") == 2 * 1024 * 1024


def test_need_from_memory_applies_only_without_a_hugepage_request() -> None:
    vm = msgspec.convert({"spec": {"containers": [{"resources": {"requests": {"memory": "4Gi", "cpu": "2"}}}]}}, Pod)
    assert pod_demand(vm, ("hugepages-2Mi",), need_from_memory=True).bytes_of("hugepages-2Mi") == 4 * GiB
    assert pod_demand(vm, ("hugepages-2Mi",), need_from_memory=False).bytes_of("hugepages-2Mi") == 0
    assert pod_demand(vm, ("hugepages-2Mi",), need_from_memory=True).cpu_millis == 2000
    explicit = msgspec.convert(
        {"spec": {"containers": [{"resources": {"requests": {"memory": "4Gi", "hugepages-2Mi": "1Gi"}}}]}}, Pod
    )
    assert pod_demand(explicit, ("hugepages-2Mi",), need_from_memory=True).bytes_of("hugepages-2Mi") == GiB


def test_need_from_memory_with_a_runtime_class_counts_only_that_runtimes_pods() -> None:
    # A namespace of VMs that also runs plain pods (sidecars, tools, the soak's pause pods): only the
    # VM runtime's pods have guest RAM on pages; a plain pod counted by its memory would hold room no
    # page ever fills (the 60-minute soak's 4 pages per plain pod on the consumers' node).
    def spec(runtime: str | None) -> Pod:
        resources = {"requests": {"memory": "128Mi"}}
        body: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
        if runtime is not None:
            body["runtimeClassName"] = runtime
        return msgspec.convert({"spec": body}, Pod)

    def need(p: Pod, runtime_class: str) -> int:
        return pod_demand(p, ("hugepages-2Mi",), need_from_memory=True, memory_runtime_class=runtime_class).bytes_of(
            "hugepages-2Mi"
        )

    assert need(spec("kata-qemu"), "kata-qemu") == 128 << 20
    assert need(spec(None), "kata-qemu") == 0
    assert need(spec("runc"), "kata-qemu") == 0
    assert need(spec(None), "") == 128 << 20  # no class named: every pod that asks no pages, as before
    assert need(spec("runc"), "") == 128 << 20
