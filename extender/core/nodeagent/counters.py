"""Parsing the kernel's hugepage counters and the pods' hugetlb charges: pure functions.

Every function takes the text of a file (or a few integers) and returns small
frozen values; ``probe`` reads the files. The arithmetic the record rests on:

- the kernel's pool of one page size is ``nr_hugepages`` persistent pages plus
  ``surplus_hugepages`` (overcommitted) ones; ``free_hugepages`` counts free pages of
  both, and ``resv_hugepages`` pages promised to mappings but not yet faulted;
- committed pages = (nr + surplus) - free + resv: faulted pages plus promises
  (an untouched shared mapping raises resv, a touched private one lowers free);
- pages pods hold = what the hugetlb cgroup controller charges to the kubelet's
  pods hierarchy (the larger of usage and reservation charges: a faulted page of a
  reserved mapping is in both, an unfaulted reservation only in the second, a
  MAP_NORESERVE page only in the first; the reservations beyond usage at most the
  kernel's ``resv``, since a mapping being torn down frees its pages before its
  reservation charge goes), or, where the controller is off
  (containerd's default), for each pod the larger of the pages of the files in its
  hugetlbfs emptyDirs and the most ``HugetlbPages`` any one of its processes maps
  (``/proc/<pid>/status``): a VM runtime's guest RAM on a hugetlbfs mount or memfd of
  its own is in no emptyDir, and without its processes those pages would be counted
  outside pods while ``needFromMemory`` counts the pod's memory too. Both are at most
  what the pod holds (a file's pages are the pod's; one process's mappings are too,
  whereas a sum over processes would count a shared file once per process);
- pages held outside pods = committed - pods' pages, floored at 0. The files are not read
  at one instant: where pages moved during a read, ``probe`` combines its readings with
  ``most_committed`` and ``fewer_pod_pages``, so that the pages outside pods err high.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

KiB = 1024
_PAGE_DIR = re.compile(r"^hugepages-(?P<kb>[0-9]+)kB$")
_NODE_DIR = re.compile(r"^node(?P<n>[0-9]+)$")
_SIZE = re.compile(r"^(?P<n>[0-9]+)(?P<unit>[KMGT]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": KiB, "M": KiB**2, "G": KiB**3, "T": KiB**4}


class CounterError(ValueError):
    """A counter file whose text is not a count."""


class Source(StrEnum):
    """Where the pods' pages were read from; the record says which."""

    CGROUP_V2 = "cgroup-v2"  # hugetlb.<size>.current / .rsvd.current of the kubepods cgroup
    CGROUP_V1 = "cgroup-v1"  # hugetlb.<size>.usage_in_bytes / .rsvd.usage_in_bytes
    # files in the pods' HugePages emptyDirs, and their processes' HugetlbPages (host PID view)
    HUGETLBFS_EMPTYDIR = "hugetlbfs-emptydir"
    NONE = "none"  # nothing readable: pods' pages unknown, so pages outside pods unknown too


def parse_count(text: str) -> int:
    """A counter file's value: one non-negative integer (sysfs and cgroup files end in a newline)."""
    stripped = text.strip()
    if not stripped.isdigit() or not stripped.isascii():
        raise CounterError(f"not a count: {text[:40]!r}")
    return int(stripped)


def page_size_of_dir(name: str) -> int | None:
    """Bytes per page of a sysfs directory such as ``hugepages-2048kB``; None for other names."""
    match = _PAGE_DIR.match(name)
    return int(match["kb"]) * KiB if match else None


def numa_node_of_dir(name: str) -> int | None:
    """The number of a ``nodeN`` directory; None for other names."""
    match = _NODE_DIR.match(name)
    return int(match["n"]) if match else None


def resource_name(page_size: int) -> str:
    """The Kubernetes resource of a page size: 2 MiB -> ``hugepages-2Mi``, 1 GiB -> ``hugepages-1Gi``."""
    for unit, suffix in ((KiB**3, "Gi"), (KiB**2, "Mi"), (KiB, "Ki")):
        if page_size % unit == 0:
            return f"hugepages-{page_size // unit}{suffix}"
    return f"hugepages-{page_size}"


def cgroup_size_name(page_size: int) -> str:
    """The size in the hugetlb controller's file names (the kernel's ``mem_fmt``): ``2MB``, ``1GB``, ``64KB``."""
    for unit, suffix in ((KiB**3, "GB"), (KiB**2, "MB"), (KiB, "KB")):
        if page_size >= unit:
            return f"{page_size // unit}{suffix}"
    return f"{page_size}B"


def parse_size(text: str) -> int:
    """A hugetlbfs ``pagesize=`` option (``2M``, ``1G``, ``2048K``) in bytes."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise CounterError(f"not a page size: {text!r}")
    return int(match["n"]) * _UNITS[match["unit"].upper()]


def parse_node_list(text: str) -> list[int]:
    """``/sys/devices/system/node/online``: ``0``, ``0-1``, ``0,2-3``."""
    nodes: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise CounterError(f"not a node list: {text!r}") from None
        nodes.extend(range(first, last + 1))
    return nodes


def parse_numa_stat(text: str) -> dict[int, int]:
    """Bytes per NUMA node from ``hugetlb.<size>.numa_stat``.

    cgroup v2 writes one line, ``total=B N0=B N1=B``; v1 writes ``total=`` (this cgroup's
    own tasks) and ``hierarchical_total=`` (with its descendants, the one wanted here)."""
    lines = {line.partition("=")[0].strip(): line for line in text.splitlines()}
    line = lines.get("hierarchical_total") or lines.get("total")
    if line is None:
        raise CounterError(f"not a numa_stat: {text[:60]!r}")
    found: dict[int, int] = {}
    for item in line.split()[1:]:
        key, _, value = item.partition("=")
        if not key.startswith("N"):
            continue
        try:
            found[int(key[1:])] = parse_count(value)
        except ValueError:
            raise CounterError(f"not a numa_stat entry: {item!r}") from None
    return found


@dataclass(frozen=True, slots=True)
class HugetlbfsMount:
    mount_point: str
    page_size: int


def hugetlbfs_mounts(mountinfo: str, under: str) -> list[HugetlbfsMount]:
    """The hugetlbfs mounts below ``under`` (the kubelet's pods directory), from ``/proc/self/mountinfo``.

    A line is ``id parent major:minor root mount-point options [optional...] - fstype source super-options``;
    octal escapes (``\\040`` for a space) are undone in the mount point."""
    prefix = under.rstrip("/") + "/"
    found: list[HugetlbfsMount] = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or len(fields) < 5 or fields[dash + 1] != "hugetlbfs":
            continue
        mount_point = _unescape(fields[4])
        if not mount_point.startswith(prefix):
            continue
        options = {opt.partition("=")[0]: opt.partition("=")[2] for opt in fields[dash + 3].split(",") if opt}
        page_size = options.get("pagesize")
        if page_size is None:
            continue  # the kernel always shows pagesize=; a line without it is not one it wrote
        found.append(HugetlbfsMount(mount_point, parse_size(page_size)))
    return found


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), path)


# --------------------------------------------------------------------------- the values


@dataclass(frozen=True, slots=True)
class KernelPool:
    """One page size's counters, for the whole machine (``reserved`` set) or one NUMA node (``None``:
    the kernel keeps reservations globally only)."""

    total: int  # nr_hugepages: the persistent pool, what the kubelet reports as capacity
    free: int
    surplus: int
    reserved: int | None = None

    @property
    def committed(self) -> int:
        """(nr + surplus) - free + resv: pages faulted in plus pages promised to mappings; at most
        the pool. ``resv`` is read before ``free`` (a fault between them counts twice, high): with
        the pool nearly full that could say more than the pool, and the extender refuses such a
        record (``read_report``), counting the node from requests only, low."""
        pool = self.total + self.surplus
        return max(0, min(pool, pool - self.free + (self.reserved or 0)))


@dataclass(frozen=True, slots=True)
class PodPages:
    """The pods' pages of one page size: in total, and per NUMA node when the source says; with a
    cgroup source, also the pages the pods' reservation charges hold beyond those (``unfaulted``)."""

    pages: int
    numa: Mapping[int, int] | None = None
    unfaulted: int = 0

    def held(self, kernel_reserved: int | None) -> int:
        """The pods' pages, their unfaulted reservations at most what the kernel still keeps
        reserved: a mapping being torn down frees its pages before its reservation charge goes,
        and for that moment the charge is no page at all."""
        unfaulted = self.unfaulted if kernel_reserved is None else min(self.unfaulted, kernel_reserved)
        return self.pages + unfaulted


@dataclass(frozen=True, slots=True)
class Figures:
    """What the record says of one page size, for the machine or one NUMA node."""

    total_pages: int
    free_pages: int
    reserved_pages: int | None
    surplus_pages: int
    pod_pages: int | None  # None: the source does not say (no source, or no per-NUMA split)
    outside_pages: int | None

    def as_json(self) -> dict[str, int | None]:
        return {
            "totalPages": self.total_pages,
            "freePages": self.free_pages,
            "reservedPages": self.reserved_pages,
            "surplusPages": self.surplus_pages,
            "podPages": self.pod_pages,
            "outsidePages": self.outside_pages,
        }


@dataclass(frozen=True, slots=True)
class SizeReport:
    figures: Figures
    numa: Mapping[int, Figures] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {**self.figures.as_json(), "numa": {str(n): f.as_json() for n, f in sorted(self.numa.items())}}


def figures(pool: KernelPool, pod_pages: int | None) -> Figures:
    outside = None if pod_pages is None else max(0, pool.committed - pod_pages)
    return Figures(pool.total, pool.free, pool.reserved, pool.surplus, pod_pages, outside)


def size_report(pool: KernelPool, numa_pools: Mapping[int, KernelPool], pods: PodPages | None) -> SizeReport:
    """One page size's figures, for the machine and for each NUMA node."""
    numa_pods = pods.numa if pods is not None and pods.numa is not None else None
    per_node = {
        node: figures(numa_pool, None if numa_pods is None else numa_pods.get(node, 0))
        for node, numa_pool in numa_pools.items()
    }
    return SizeReport(figures(pool, None if pods is None else pods.held(pool.reserved)), per_node)


def fewer_pod_pages(
    first: Mapping[int, PodPages] | None, second: Mapping[int, PodPages] | None
) -> dict[int, PodPages] | None:
    """Per page size (and NUMA node), the smaller of two readings of the pods' pages; a size or a
    NUMA split that only one reading has is taken from it. None when neither says anything."""
    if first is None or second is None:
        either = first if second is None else second
        return None if either is None else dict(either)
    fewer = {**first, **second}
    for size in first.keys() & second.keys():
        a, b = first[size], second[size]
        if a.numa is None or b.numa is None:
            numa = a.numa if b.numa is None else b.numa
        else:
            numa = {n: min(a.numa.get(n, 0), b.numa.get(n, 0)) for n in a.numa.keys() | b.numa.keys()}
        fewer[size] = PodPages(min(a.pages, b.pages), numa, min(a.unfaulted, b.unfaulted))
    return fewer


def most_committed(first: Mapping[int, KernelPool], second: Mapping[int, KernelPool]) -> dict[int, KernelPool]:
    """Per page size (or NUMA node), the reading with more pages committed; a key only one reading
    has is taken from it."""
    return {
        key: max((p for p in (first.get(key), second.get(key)) if p is not None), key=lambda p: p.committed)
        for key in first.keys() | second.keys()
    }


def most_committed_per_numa_node(
    first: Mapping[int, Mapping[int, KernelPool]], second: Mapping[int, Mapping[int, KernelPool]]
) -> dict[int, dict[int, KernelPool]]:
    """``most_committed`` for each page size's NUMA nodes."""
    return {size: most_committed(first.get(size, {}), second.get(size, {})) for size in first.keys() | second.keys()}


def pages_of(nbytes: int, page_size: int) -> int:
    """Whole pages holding ``nbytes`` (rounded up: a partly used page is used)."""
    return -(-nbytes // page_size)


def cgroup_pod_pages(
    usage_bytes: int, reserved_bytes: int | None, page_size: int, numa: Mapping[int, int] | None = None
) -> PodPages:
    """The pods' pages from the controller's two charges (see the module note): the faulted ones,
    and the reserved ones beyond them."""
    faulted = pages_of(usage_bytes, page_size)
    return PodPages(faulted, numa, max(0, pages_of(reserved_bytes or 0, page_size) - faulted))


_POD_UID = re.compile(
    r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)"
)
_HUGETLB_PAGES = re.compile(r"^HugetlbPages:\s*(?P<kb>[0-9]+) kB$", re.MULTILINE)


def pod_uid_of_cgroup(text: str) -> str | None:
    """The uid of the pod a process runs in, from its ``/proc/<pid>/cgroup``; None outside pods.

    The kubelet names a pod's cgroup ``pod<uid>`` (cgroupfs driver) or
    ``kubepods-<class>-pod<uid with _ for ->.slice`` (systemd driver), on every hierarchy."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        match = _POD_UID.search(path)
        if match:
            return match["uid"].replace("_", "-")
    return None


def pod_uid_of_emptydir(mount_point: str, pods_dir: str) -> str | None:
    """The pod uid of an emptyDir mount below the kubelet's pods dir (``<pods>/<uid>/volumes/...``)."""
    prefix = pods_dir.rstrip("/") + "/"
    if not mount_point.startswith(prefix):
        return None
    uid = mount_point[len(prefix) :].split("/", 1)[0]
    return uid or None


def hugetlb_bytes_of_status(text: str) -> int:
    """The hugetlb memory a process maps, from ``/proc/<pid>/status`` (``HugetlbPages:``; absent,
    as in kernel threads: none)."""
    match = _HUGETLB_PAGES.search(text)
    return int(match["kb"]) * KiB if match else 0


def size_of_process_pages(sizes_in_use: Iterable[int]) -> int | None:
    """The page size a process's ``HugetlbPages`` are of: ``/proc/<pid>/status`` does not split them
    by size, so only where one page size has pages committed at all; None (the process's pages
    are left out, counted outside pods: high, never low) otherwise."""
    in_use = set(sizes_in_use)
    return in_use.pop() if len(in_use) == 1 else None


def pods_pages(files: Mapping[str, Mapping[int, int]], processes: Mapping[str, Mapping[int, int]]) -> dict[int, int]:
    """The pods' pages per page size, each pod's the larger of its emptyDir files' pages and the
    most pages one of its processes maps (see the module note): both are at most what it holds."""
    total: dict[int, int] = {}
    for uid in files.keys() | processes.keys():
        own_files, own_processes = files.get(uid, {}), processes.get(uid, {})
        for size in own_files.keys() | own_processes.keys():
            total[size] = total.get(size, 0) + max(own_files.get(size, 0), own_processes.get(size, 0))
    return total


def emptydir_pod_pages(file_blocks: Iterable[int], page_size: int) -> int:
    """Pages in use by files on a hugetlbfs mount: ``st_blocks`` (512-byte units) grows by one page's
    worth for each page the file has, whatever its length says."""
    return sum(pages_of(blocks * 512, page_size) for blocks in file_blocks)
