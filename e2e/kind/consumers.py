"""The real hugepage consumers of the kind suite (test_consumers.py, soak.py): pods running the
``vm`` and ``dpdk`` images e2e/kind/images/build makes (images/consumers), and QEMU on the host,
outside any pod. Every consumer takes ``UNIT`` pages (128 MiB)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

from e2e.controlplane import wait_until
from e2e.kind.test_kind import KUBECONFIG, KUBECTL, MI, PAGE, RESOURCE, SCHEDULER_NAME, pages_in_use

VM_IMAGE = os.environ.get("KIND_E2E_VM_IMAGE", "hugepage-e2e/vm:e2e")
DPDK_IMAGE = os.environ.get("KIND_E2E_DPDK_IMAGE", "hugepage-e2e/dpdk:e2e")
# values.yaml: off, enforce and shadow, each with needFromMemory (the memory-only VMs' need).
OFF, ENFORCE, SHADOW = "hp-consumers-off", "hp-consumers", "hp-consumers-shadow"
NAMESPACES = (OFF, ENFORCE, SHADOW)
RELEASE, NAMESPACE = "hugepage-extender", "hugepage-extender"
LABEL = "hugepage-e2e-consumer"
UNIT_MB = 128  # guest RAM of a VM, DPDK's -m: 64 pages of 2 MiB
UNIT = UNIT_MB * MI // PAGE
# The consumers' own words when the pool cannot give them their pages (the strings are in the
# binaries of Debian 12's qemu-system-x86 7.2 and librte-eal23 22.11):
#   QEMU: "unable to map backing store for guest RAM: Cannot allocate memory" (its mmap of the
#     hugetlbfs file fails: the kernel reserves a shared mapping's pages at mmap time), or, had
#     the reservation passed and touching the pages not, "qemu_prealloc_mem: preallocating
#     memory failed";
#   DPDK's EAL: "EAL: Not enough memory available! Requested: 128MB, available: 64MB", with no
#     free page at all "EAL: No free 2048 kB hugepages reported on node 0", then "Cannot init
#     EAL: Cannot allocate memory" (exit 1).
CONSUMER_ERRORS = (
    "unable to map backing store for guest RAM",
    "qemu_prealloc_mem: preallocating memory failed",
    "Not enough memory available",
    "No free 2048 kB hugepages reported",
    "Cannot init EAL",
)
KINDS = ("vm-hugepages", "vm-memory", "dpdk")
# The VM runtime's RuntimeClass: the memory-only VMs run with it, and the consumer namespaces'
# needFromMemoryRuntimeClass names it (e2e/kind/values.yaml), so the plain pods beside them are
# not counted by their memory. Its handler is containerd's runc: the runtime that backs guest RAM
# with pages is the image's own script here.
RUNTIME_CLASS = "vm"
RUNTIME_CLASS_OBJECT = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": RUNTIME_CLASS},
    "handler": "runc",
}


# -- the consumers ---------------------------------------------------------------------------


def consumer_pod(namespace: str, name: str, kind: str, *, node: str | None = None, app: str = LABEL) -> dict[str, Any]:
    """A VM (``vm-hugepages``: requests hugepages-2Mi, guest RAM on its HugePages emptyDir;
    ``vm-memory``: requests only memory, guest RAM on its runtime's own hugetlbfs mount), a
    DPDK application (``dpdk``), or a plain pod (``plain``: no pages)."""
    unit = f"{UNIT_MB}Mi"
    # QEMU (TCG) itself: about 65 MiB anonymous and 25 MiB of files besides the guest's pages.
    memory = {"requests": {"cpu": "20m", "memory": unit}, "limits": {"memory": unit}}
    hugepage_volume = [{"name": "hugepages", "emptyDir": {"medium": "HugePages"}}]
    hugepage_mount = [{"name": "hugepages", "mountPath": "/hugepages"}]
    privileged = False
    if kind == "vm-hugepages":
        image, env, probe = VM_IMAGE, {"GUEST_MB": str(UNIT_MB)}, "grep -q 'guest: up' /run/serial.log"
        resources = {
            "requests": {**memory["requests"], RESOURCE: unit},
            "limits": {**memory["limits"], RESOURCE: unit},
        }
        volumes, mounts = hugepage_volume, hugepage_mount
    elif kind == "vm-memory":
        # Memory only: needFromMemory counts it (its RuntimeClass is the namespace's VM runtime's).
        # The kubelet mounts no HugePages emptyDir without a hugepage request; the runtime (the
        # image's script) mounts hugetlbfs itself.
        image, env, probe = VM_IMAGE, {"GUEST_MB": str(UNIT_MB)}, "grep -q 'guest: up' /run/serial.log"
        resources, volumes, mounts, privileged = memory, [], [], True
    elif kind == "dpdk":
        image, env, probe = DPDK_IMAGE, {"DPDK_MB": str(UNIT_MB)}, "grep -q 'packet forwarding' /run/testpmd.log"
        # The forwarding lcore polls without pause: its CPU limit keeps it to a sliver of a core.
        resources = {
            "requests": {"cpu": "20m", "memory": "64Mi", RESOURCE: unit},
            "limits": {"cpu": "100m", "memory": "64Mi", RESOURCE: unit},
        }
        volumes, mounts = hugepage_volume, hugepage_mount
    elif kind == "plain":
        image, env, probe = "registry.k8s.io/pause:3.10", {}, None
        resources = {"requests": {"cpu": "5m", "memory": "8Mi"}, "limits": {"memory": "8Mi"}}
        volumes, mounts = [], []
    else:
        raise ValueError(kind)
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": resources,
        "volumeMounts": mounts,
        # A consumer that fails says why in its log's last lines: they become its status's message,
        # which shadow's scorecard shows beside its verdict.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if probe is not None:
        container["readinessProbe"] = {"exec": {"command": ["sh", "-c", probe]}, "periodSeconds": 1}
    if privileged:
        container["securityContext"] = {"privileged": True}
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "volumes": volumes,
        "containers": [container],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if kind == "vm-memory":
        spec["runtimeClassName"] = RUNTIME_CLASS
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app, "consumer": kind}},
        "spec": spec,
    }


def consumer_error(namespace: str, name: str) -> str | None:
    """The first line of the pod's output with one of the consumers' own errors, or None."""
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", KUBECONFIG, "logs", name, "-n", namespace],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in result.stdout.splitlines():
        if any(error in line for error in CONSUMER_ERRORS):
            return line.strip()
    return None


class HostVM:
    """QEMU outside any pod (an OVS-DPDK or a VM a node's own agent started), its guest RAM
    ``pages`` of 2 MiB preallocated on a hugetlbfs mount of its own; stopped (-S): it holds them
    all the same, and takes no CPU."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self._directory: str | None = None
        self._qemu: subprocess.Popen[str] | None = None

    def start(self) -> None:
        before = pages_in_use()
        self._directory = tempfile.mkdtemp(prefix="hugepage-e2e-host-vm.")
        mount = ["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "hugepage-e2e-host", self._directory]
        subprocess.run(mount, check=True)
        size = f"{self.pages * 2}M"
        command = [
            "qemu-system-x86_64", "-machine", "pc", "-accel", "tcg", "-m", size,
            "-object", f"memory-backend-file,id=ram,size={size},mem-path={self._directory},prealloc=on,share=on",
            "-numa", "node,memdev=ram", "-nodefaults", "-display", "none", "-S",
        ]  # fmt: skip
        self._qemu = qemu = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def holding() -> bool:
            if qemu.poll() is not None:
                raise AssertionError(f"QEMU on the host exited: {qemu.stderr.read() if qemu.stderr else ''}")
            return pages_in_use() - before >= self.pages

        try:
            wait_until(f"QEMU on the host to hold {self.pages} pages", holding, timeout=60, interval=0.5)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._qemu is not None:
            self._qemu.kill()
            self._qemu.wait()
            if self._qemu.stderr is not None:
                self._qemu.stderr.close()
            self._qemu = None
        if self._directory is not None:
            subprocess.run(["umount", self._directory], check=False)
            os.rmdir(self._directory)
            self._directory = None


@contextlib.contextmanager
def vm_on_the_host(pages: int) -> Iterator[HostVM]:
    vm = HostVM(pages)
    vm.start()
    try:
        yield vm
    finally:
        vm.stop()
