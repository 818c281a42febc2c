"""The agent's I/O: read the counter files under the roots given, hand the text to ``counters``.

Roots are parameters (``--sysfs-root``, ``--cgroup-root``, ``--kubelet-root``,
``--mountinfo``, ``--proc-root``) so tests point them at fixture trees. A missing or unreadable file
leaves out what it would have said (a page size, a NUMA node, a source), never the record.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

from extender.core.nodeagent.counters import (
    CounterError,
    KernelPool,
    PodPages,
    SizeReport,
    Source,
    cgroup_pod_pages,
    cgroup_size_name,
    emptydir_pod_pages,
    fewer_pod_pages,
    hugetlb_bytes_of_status,
    hugetlbfs_mounts,
    most_committed,
    most_committed_per_numa_node,
    numa_node_of_dir,
    page_size_of_dir,
    pages_of,
    parse_count,
    parse_node_list,
    parse_numa_stat,
    pod_uid_of_cgroup,
    pod_uid_of_emptydir,
    pods_pages,
    resource_name,
    size_of_process_pages,
    size_report,
)
from extender.core.nodeagent.record import NodeRecord

log = logging.getLogger("extender.nodeagent")

# Where the kubelet puts pods: the systemd cgroup driver, then cgroupfs.
KUBEPODS = ("kubepods.slice", "kubepods")


@dataclass(frozen=True, slots=True)
class Roots:
    sysfs: Path = Path("/sys")
    cgroup: Path = Path("/sys/fs/cgroup")
    kubelet: Path = Path("/var/lib/kubelet")
    mountinfo: Path = Path("/proc/self/mountinfo")
    kubepods: tuple[str, ...] = KUBEPODS  # the pods' cgroup, relative to a hierarchy's root
    proc: Path = Path("/proc")  # the host's PIDs (the agent's pod: hostPID) for the pods' processes


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _count(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_count(text)
    except CounterError as error:
        log.warning("%s: %s", path, error)
        return None


def _pool(directory: Path, *, with_reserved: bool) -> KernelPool | None:
    # Reservations before free pages: a page faulted in between lowers both, and
    # read in this order it counts twice (committed too high for a moment) instead
    # of not at all (too low: room offered that is not there).
    reserved = (_count(directory / "resv_hugepages") or 0) if with_reserved else None
    total, free = _count(directory / "nr_hugepages"), _count(directory / "free_hugepages")
    if total is None or free is None:
        return None
    surplus = _count(directory / "surplus_hugepages") or 0
    return KernelPool(total, free, surplus, reserved)  # NUMA nodes: the kernel keeps reservations globally only


def _page_dirs(directory: Path) -> Iterator[tuple[int, Path]]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return
    for entry in entries:
        size = page_size_of_dir(entry.name)
        if size is not None:
            yield size, entry


def kernel_pools(sysfs: Path) -> dict[int, KernelPool]:
    """Per page size, the machine's pool (``/sys/kernel/mm/hugepages``)."""
    pools = {}
    for size, directory in _page_dirs(sysfs / "kernel" / "mm" / "hugepages"):
        pool = _pool(directory, with_reserved=True)
        if pool is not None:
            pools[size] = pool
    return pools


def numa_pools(sysfs: Path) -> dict[int, dict[int, KernelPool]]:
    """Per page size, per NUMA node: ``/sys/devices/system/node/nodeN/hugepages``."""
    base = sysfs / "devices" / "system" / "node"
    online = _read(base / "online")
    if online is not None:
        try:
            nodes = parse_node_list(online)
        except CounterError as error:
            log.warning("%s: %s", base / "online", error)
            nodes = []
    else:
        try:
            nodes = sorted(n for e in base.iterdir() if (n := numa_node_of_dir(e.name)) is not None)
        except OSError:
            nodes = []
    found: dict[int, dict[int, KernelPool]] = {}
    for node in nodes:
        for size, directory in _page_dirs(base / f"node{node}" / "hugepages"):
            pool = _pool(directory, with_reserved=False)
            if pool is not None:
                found.setdefault(size, {})[node] = pool
    return found


def _kubepods(base: Path, names: tuple[str, ...]) -> Path | None:
    return next((base / name for name in names if (base / name).is_dir()), None)


def _v2_trees(cgroup: Path) -> Iterator[Path]:
    """Unified trees with the hugetlb controller: the root (pure v2), or ``unified/`` (hybrid)."""
    for base in (cgroup, cgroup / "unified"):
        controllers = _read(base / "cgroup.controllers")
        if controllers is not None and "hugetlb" in controllers.split():
            yield base


def _cgroup_pages(
    kubepods: Path, sizes: list[int], usage: str, reserved: str, numa: Callable[[int], dict[int, int] | None]
) -> dict[int, PodPages] | None:
    found = {}
    for size in sizes:
        name = cgroup_size_name(size)
        used = _count(kubepods / f"hugetlb.{name}.{usage}")
        if used is None:
            return None  # the controller is not on here
        rsvd = _count(kubepods / f"hugetlb.{name}.{reserved}")
        numa_bytes = numa(size)
        numa_pages = None if numa_bytes is None else {n: pages_of(b, size) for n, b in numa_bytes.items()}
        found[size] = cgroup_pod_pages(used, rsvd, size, numa_pages)
    return found


def _numa_stat(path: Path) -> dict[int, int] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_numa_stat(text)
    except CounterError as error:
        log.warning("%s: %s", path, error)
        return None


def _numa_stats(kubepods: Path) -> Callable[[int], dict[int, int] | None]:
    def read(size: int) -> dict[int, int] | None:
        return _numa_stat(kubepods / f"hugetlb.{cgroup_size_name(size)}.numa_stat")

    return read


def _file_blocks(directory: Path, seen: set[tuple[int, int]]) -> Iterator[int]:
    """``st_blocks`` of each file under ``directory`` not in ``seen`` (device, inode), which it joins:
    a file's pages once, however many names it has (hard links) or mounts show it (bind mounts).
    Counted by name, 410 links to a file of one page made 411 pod pages, and pages held outside
    pods disappeared from the record."""
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                stat = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                yield stat.st_blocks


def _sizes_with_a_pool(sysfs: Path) -> list[int]:
    """The page sizes whose pool has any page (persistent or surplus)."""
    found = []
    for size, directory in _page_dirs(sysfs / "kernel" / "mm" / "hugepages"):
        pool = _pool(directory, with_reserved=False)
        if pool is not None and pool.total + pool.surplus > 0:
            found.append(size)
    return found


def _processes_pages(proc: Path, size: int | None) -> dict[str, dict[int, int]]:
    """Per pod uid, the most pages one of its processes maps (``HugetlbPages`` in
    ``/proc/<pid>/status``, the pod from ``/proc/<pid>/cgroup``; both readable without
    privileges). Nothing when the pages' size cannot be told (``size_of_process_pages``)."""
    found: dict[str, dict[int, int]] = {}
    if size is None:
        return found
    try:
        pids = [entry for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        status = _read(pid / "status")
        nbytes = 0 if status is None else hugetlb_bytes_of_status(status)
        if nbytes == 0:
            continue
        cgroup = _read(pid / "cgroup")
        uid = None if cgroup is None else pod_uid_of_cgroup(cgroup)
        if uid is None:
            continue  # outside pods: the host's, or a runtime's outside any pod
        own = found.setdefault(uid, {})
        own[size] = max(own.get(size, 0), pages_of(nbytes, size))
    return found


PodsReading = tuple[Source, dict[int, PodPages] | None]  # where the pods' pages were read, and per page size


def pod_pages(roots: Roots, sizes: list[int]) -> PodsReading:
    """The pods' pages per page size, and where they were read: the first source that answers of the
    hugetlb controller under cgroup v2, under cgroup v1, and the pods' hugetlbfs emptyDirs."""
    found = _cgroup_v2_pages(roots, sizes)
    if found is not None:
        return Source.CGROUP_V2, found
    found = _cgroup_v1_pages(roots, sizes)
    if found is not None:
        return Source.CGROUP_V1, found
    found = _emptydir_pages(roots, sizes)
    if found is not None:
        return Source.HUGETLBFS_EMPTYDIR, found
    return Source.NONE, None


def _cgroup_v2_pages(roots: Roots, sizes: list[int]) -> dict[int, PodPages] | None:
    """The pods' pages the hugetlb controller counts on the first cgroup v2 tree holding the pods."""
    for tree in _v2_trees(roots.cgroup):
        kubepods = _kubepods(tree, roots.kubepods)
        if kubepods is None:
            continue
        found = _cgroup_pages(
            kubepods,
            sizes,
            "current",
            "rsvd.current",
            _numa_stats(kubepods),
        )
        if found is not None:
            return found
    return None


def _cgroup_v1_pages(roots: Roots, sizes: list[int]) -> dict[int, PodPages] | None:
    """The pods' pages the cgroup v1 hugetlb hierarchy counts."""
    kubepods = _kubepods(roots.cgroup / "hugetlb", roots.kubepods)
    if kubepods is None:
        return None
    return _cgroup_pages(
        kubepods,
        sizes,
        "usage_in_bytes",
        "rsvd.usage_in_bytes",
        _numa_stats(kubepods),
    )


def _emptydir_pages(roots: Roots, sizes: list[int]) -> dict[int, PodPages] | None:
    """The pods' pages in the files of their hugetlbfs emptyDirs and mapped by their processes, with
    no hugetlb controller to count them; None when the mounts cannot be read."""
    mountinfo = _read(roots.mountinfo)
    pods_dir = roots.kubelet / "pods"
    if mountinfo is None or not pods_dir.is_dir():
        return None
    try:
        mounts = hugetlbfs_mounts(mountinfo, str(pods_dir))
    except CounterError as error:
        log.warning("%s: %s", roots.mountinfo, error)
        return None
    files: dict[str, dict[int, int]] = {}
    seen: set[tuple[int, int]] = set()  # across mounts: a bind mount shows the same files
    for mount in mounts:
        uid = pod_uid_of_emptydir(mount.mount_point, str(pods_dir)) or mount.mount_point
        own = files.setdefault(uid, {})
        pages = emptydir_pod_pages(_file_blocks(Path(mount.mount_point), seen), mount.page_size)
        own[mount.page_size] = own.get(mount.page_size, 0) + pages
    processes = _processes_pages(roots.proc, size_of_process_pages(_sizes_with_a_pool(roots.sysfs)))
    per_size = pods_pages(files, processes)
    return {size: PodPages(per_size.get(size, 0)) for size in sizes}


def page_sizes(sysfs: Path) -> list[int]:
    """The machine's page sizes, from the names of ``/sys/kernel/mm/hugepages``."""
    return [size for size, _ in _page_dirs(sysfs / "kernel" / "mm" / "hugepages")]


# Kernel readings at most per record. A quiet node settles in two; pods that keep taking and giving
# back pages throughout all of them get a record that errs high (``read_record``).
READ_PASSES = 4

KernelReading = tuple[dict[int, KernelPool], dict[int, dict[int, KernelPool]]]  # the machine's, per NUMA node


def _settled_reading(roots: Roots) -> tuple[KernelReading, PodsReading]:
    """The kernel's pools and the pods' pages, read until nothing moved, else combined from every
    reading towards too many pages outside pods (``read_record``)."""
    sizes = page_sizes(roots.sysfs)
    pods = [pod_pages(roots, sizes)]
    kernel: list[KernelReading] = []
    for _ in range(READ_PASSES):
        kernel.append((kernel_pools(roots.sysfs), numa_pools(roots.sysfs)))
        pods.append(pod_pages(roots, sizes))
        if len(kernel) >= 2 and kernel[-1] == kernel[-2] and pods[-1] == pods[-2] == pods[-3]:
            return kernel[-1], pods[-1]
    pools = reduce(most_committed, (pools for pools, _ in kernel))
    per_numa = reduce(most_committed_per_numa_node, (per_numa for _, per_numa in kernel))
    source = pods[-1][0]  # a source that changed meanwhile (the controller turned on): the last one's readings
    pods_now = reduce(fewer_pod_pages, (found for read_from, found in pods if read_from == source))
    return (pools, per_numa), (source, pods_now)


def read_record(node: str, roots: Roots, now: Callable[[], dt.datetime] | None = None) -> NodeRecord:
    """The record of this node now.

    The kernel's counters and the pods' charges are separate files, read one after another while
    pods may take and give back pages: pods' pages read just after the counters can include a
    starting pod's pages that the counters missed, and the record would count too few pages outside
    pods, offering room the kernel does not have. So the pods' pages are read before, between and
    after the kernel's counters, which are read twice (up to ``READ_PASSES`` times): when two
    kernel readings agree and the three pods' readings around them agree, nothing moved and the
    record is that instant's. When pages kept moving, the record takes the most pages committed of
    any kernel reading and the fewest pods' pages of any pods' reading: too many pages outside pods
    until the next read, never too few unless every reading was torn the same way."""
    (pools, per_numa), (source, pods_now) = _settled_reading(roots)
    reports = {
        resource_name(size): size_report(pool, per_numa.get(size, {}), None if pods_now is None else pods_now.get(size))
        for size, pool in pools.items()
    }
    observed = (now or (lambda: dt.datetime.now(dt.UTC)))()
    return NodeRecord(node, observed, source, reports)


__all__ = ["KUBEPODS", "Roots", "SizeReport", "kernel_pools", "numa_pools", "page_sizes", "pod_pages", "read_record"]
