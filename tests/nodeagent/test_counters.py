"""The agent's pure parsing and arithmetic, as tables."""

from __future__ import annotations

import pytest

from extender.core.nodeagent.counters import (
    CounterError,
    HugetlbfsMount,
    KernelPool,
    PodPages,
    cgroup_pod_pages,
    cgroup_size_name,
    emptydir_pod_pages,
    fewer_pod_pages,
    hugetlb_bytes_of_status,
    hugetlbfs_mounts,
    most_committed,
    most_committed_per_numa_node,
    page_size_of_dir,
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

MiB, GiB = 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0\n", 0), ("512\n", 512), (" 7 ", 7)],
)
def test_parse_count(text: str, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["", "-1\n", "NaN", "1e9", "12 pages", "٣"])
def test_parse_count_refuses_what_is_not_a_count(text: str) -> None:
    with pytest.raises(CounterError):
        parse_count(text)


@pytest.mark.parametrize(
    ("name", "size", "resource", "cgroup"),
    [
        ("hugepages-2048kB", 2 * MiB, "hugepages-2Mi", "2MB"),
        ("hugepages-1048576kB", GiB, "hugepages-1Gi", "1GB"),
        ("hugepages-64kB", 64 * 1024, "hugepages-64Ki", "64KB"),
        ("hugepages-32768kB", 32 * MiB, "hugepages-32Mi", "32MB"),
    ],
)
def test_page_sizes_in_each_naming(name: str, size: int, resource: str, cgroup: str) -> None:
    assert page_size_of_dir(name) == size
    assert resource_name(size) == resource
    assert cgroup_size_name(size) == cgroup


def test_other_directory_names_are_not_page_sizes() -> None:
    assert page_size_of_dir("hugepages-2048") is None
    assert page_size_of_dir("power") is None


@pytest.mark.parametrize(("text", "nodes"), [("0\n", [0]), ("0-1\n", [0, 1]), ("0,2-3\n", [0, 2, 3]), ("", [])])
def test_parse_node_list(text: str, nodes: list[int]) -> None:
    assert parse_node_list(text) == nodes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("total=4194304 N0=2097152 N1=2097152\n", {0: 2 * MiB, 1: 2 * MiB}),  # cgroup v2
        # cgroup v1: hierarchical_total includes the pods below kubepods
        ("total=0 N0=0 N1=0\nhierarchical_total=6291456 N0=6291456 N1=0\n", {0: 6 * MiB, 1: 0}),
    ],
)
def test_parse_numa_stat(text: str, expected: dict[int, int]) -> None:
    assert parse_numa_stat(text) == expected


def test_hugetlbfs_mounts_below_the_kubelet_pods_dir() -> None:
    pods = "/var/lib/kubelet/pods"
    mountinfo = "\n".join(
        [
            "22 1 0:20 / /sys rw,nosuid - sysfs sysfs rw",
            "40 22 0:45 / /dev/hugepages rw,relatime - hugetlbfs hugetlbfs rw,pagesize=2M",
            f"501 30 0:77 / {pods}/u1/volumes/kubernetes.io~empty-dir/hp rw,relatime - hugetlbfs nodev rw,pagesize=2M",
            f"502 30 0:78 / {pods}/u2/volumes/kubernetes.io~empty-dir/hp\\0401g rw shared:5"
            " - hugetlbfs nodev rw,pagesize=1024M",
            f"503 30 0:79 / {pods}/u3/volumes/kubernetes.io~empty-dir/cache rw - tmpfs tmpfs rw",
        ]
    )
    assert hugetlbfs_mounts(mountinfo, pods) == [
        HugetlbfsMount(f"{pods}/u1/volumes/kubernetes.io~empty-dir/hp", 2 * MiB),
        HugetlbfsMount(f"{pods}/u2/volumes/kubernetes.io~empty-dir/hp 1g", GiB),
    ]


@pytest.mark.parametrize(
    ("case", "pool", "expected"),
    [
        ("empty pool", KernelPool(total=0, free=0, surplus=0, reserved=0), 0),
        ("touched private pages lower free: 512 - 500", KernelPool(512, 500, 0, 0), 12),
        ("untouched shared mapping raises resv: 512 - 512 + 30", KernelPool(512, 512, 0, 30), 30),
        ("surplus pages are pool too: 512 + 4 - 0 + 0", KernelPool(512, 0, 4, 0), 516),
        ("NUMA node (no resv): 256 - 200", KernelPool(256, 200, 0), 56),
        # resv read before free, a fault between: the fault counted twice, but never past the pool
        # (the 60-minute soak's control-plane record was refused twice so).
        ("a reading past the pool: at most the pool", KernelPool(512, 0, 0, 8), 512),
    ],
)
def test_committed_pages(case: str, pool: KernelPool, expected: int) -> None:
    assert pool.committed == expected, case


@pytest.mark.parametrize(
    ("case", "usage", "reserved", "pages"),
    [
        ("faulted pages of a reserved mapping count once: max(8, 8) MiB", 8 * MiB, 8 * MiB, 4),
        ("an unfaulted reservation: max(0, 8 MiB)", 0, 8 * MiB, 4),
        ("MAP_NORESERVE pages: max(6 MiB, 0)", 6 * MiB, 0, 3),
        ("no rsvd file (kernel < 5.7): usage alone", 6 * MiB, None, 3),
    ],
)
def test_cgroup_pod_pages(case: str, usage: int, reserved: int | None, pages: int) -> None:
    # The kernel keeps 16 pages reserved, more than any reservation here.
    assert cgroup_pod_pages(usage, reserved, 2 * MiB).held(16) == pages, case


def test_a_reservation_charge_outliving_its_pages_is_no_page() -> None:
    # A mapping of 8 pages, all faulted, being torn down: 7 pages freed already, its charge of
    # 8 not gone yet; the kernel keeps no reservation. The pods hold 1 page, not 8.
    torn = cgroup_pod_pages(1 * 2 * MiB, 8 * 2 * MiB, 2 * MiB)
    assert (torn.pages, torn.unfaulted) == (1, 7)
    assert torn.held(0) == 1
    assert size_report(KernelPool(20, 13, 0, 0), {}, torn).figures.outside_pages == 6  # 7 committed - 1
    # The same charges with 7 pages reserved in the kernel (a mapping not yet faulted): 8.
    assert torn.held(7) == 8


def test_emptydir_pages_come_from_blocks_not_lengths() -> None:
    # 4096 blocks of 512 bytes = 2 MiB = one page; a truncated but untouched file has none.
    assert emptydir_pod_pages([4096, 8192, 0], 2 * MiB) == 3


@pytest.mark.parametrize(
    ("case", "pool", "pods", "outside"),
    [
        ("nothing held", KernelPool(512, 512, 0, 0), PodPages(0), 0),
        ("pods hold all that is used: 512 - 412 = 100 = pods", KernelPool(512, 412, 0, 0), PodPages(100), 0),
        ("a daemon holds 64 beyond pods: (512 - 348) - 100", KernelPool(512, 348, 0, 0), PodPages(100), 64),
        ("reservations count: (512 - 512 + 40) - 0", KernelPool(512, 512, 0, 40), PodPages(0), 40),
        ("pods charged more than committed (racing reads): floored at 0", KernelPool(512, 500, 0, 0), PodPages(30), 0),
        ("pods' pages unknown: outside unknown", KernelPool(512, 400, 0, 0), None, None),
    ],
)
def test_outside_pages(case: str, pool: KernelPool, pods: PodPages | None, outside: int | None) -> None:
    assert size_report(pool, {}, pods).figures.outside_pages == outside, case


def test_numa_figures_need_a_per_node_split_of_the_pods_pages() -> None:
    pools = {0: KernelPool(256, 100, 0), 1: KernelPool(256, 256, 0)}
    split = size_report(KernelPool(512, 356, 0, 0), pools, PodPages(150, {0: 150, 1: 0}))
    assert {n: (f.pod_pages, f.outside_pages) for n, f in split.numa.items()} == {0: (150, 6), 1: (0, 0)}
    unsplit = size_report(KernelPool(512, 356, 0, 0), pools, PodPages(150))
    assert {n: (f.pod_pages, f.outside_pages) for n, f in unsplit.numa.items()} == {0: (None, None), 1: (None, None)}
    assert split.figures.outside_pages == unsplit.figures.outside_pages == 6


def test_fewer_pod_pages_keeps_the_smaller_reading_per_size_and_numa_node() -> None:
    before = {2 * MiB: PodPages(16, {0: 10, 1: 6}), GiB: PodPages(2, None)}
    after = {2 * MiB: PodPages(24, {0: 10, 1: 14}), GiB: PodPages(1, {0: 1}), 64 * 1024: PodPages(3)}
    assert fewer_pod_pages(before, after) == {
        2 * MiB: PodPages(16, {0: 10, 1: 6}),
        GiB: PodPages(1, {0: 1}),  # a NUMA split only one reading has comes from it
        64 * 1024: PodPages(3),  # so does a size
    }
    assert fewer_pod_pages({2 * MiB: PodPages(4, {0: 4})}, {2 * MiB: PodPages(4, {1: 4})}) == {
        2 * MiB: PodPages(4, {0: 0, 1: 0})  # a node missing from a reading holds none in it
    }
    assert fewer_pod_pages(None, after) == after
    assert fewer_pod_pages(before, None) == before
    assert fewer_pod_pages(None, None) is None


def test_more_committed_keeps_the_reading_with_more_pages_committed() -> None:
    first = {2 * MiB: KernelPool(64, 40, 0, 0), GiB: KernelPool(4, 1, 0, 0)}
    second = {2 * MiB: KernelPool(64, 48, 0, 16), 64 * 1024: KernelPool(8, 8, 0, 0)}
    assert most_committed(first, second) == {
        2 * MiB: KernelPool(64, 48, 0, 16),  # 64 - 48 + 16 = 32 > 24
        GiB: KernelPool(4, 1, 0, 0),
        64 * 1024: KernelPool(8, 8, 0, 0),
    }
    numa = most_committed_per_numa_node(
        {2 * MiB: {0: KernelPool(32, 10, 0), 1: KernelPool(32, 32, 0)}},
        {2 * MiB: {0: KernelPool(32, 20, 0), 1: KernelPool(32, 30, 0)}},
    )
    assert numa == {2 * MiB: {0: KernelPool(32, 10, 0), 1: KernelPool(32, 30, 0)}}


UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.mark.parametrize(
    ("text", "uid"),
    [
        pytest.param(
            "12:hugetlb:/\n4:memory:/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-abc.scope\n0::/\n",
            UID,
            id="systemd driver (a kind node): uid with underscores",
        ),
        pytest.param(f"5:cpu,cpuacct:/kubepods/burstable/pod{UID}/0123abcd\n", UID, id="cgroupfs driver"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-1.scope\n",
            UID,
            id="cgroup v2, guaranteed",
        ),
        pytest.param("4:memory:/system.slice/qemu.service\n0::/\n", None, id="a host process"),
        pytest.param(f"4:memory:/docker/pod{UID}\n", None, id="named like a pod, not below kubepods"),
        pytest.param("", None, id="a process gone (empty)"),
    ],
)
def test_pod_uid_of_cgroup(text: str, uid: str | None) -> None:
    assert pod_uid_of_cgroup(text) == uid


def test_pod_uid_of_emptydir() -> None:
    pods = "/var/lib/kubelet/pods"
    assert pod_uid_of_emptydir(f"{pods}/{UID}/volumes/kubernetes.io~empty-dir/hp", pods + "/") == UID
    assert pod_uid_of_emptydir("/mnt/hugepages", pods) is None


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("Name:\tqemu\nVmRSS:\t  4096 kB\nHugetlbPages:\t  131072 kB\nThreads:\t4\n", 128 * MiB),
        ("Name:\tbash\nHugetlbPages:\t       0 kB\n", 0),
        ("Name:\tkthreadd\nState:\tS (sleeping)\n", 0),  # kernel threads have no memory lines
    ],
)
def test_hugetlb_bytes_of_status(text: str, nbytes: int) -> None:
    assert hugetlb_bytes_of_status(text) == nbytes


def test_process_pages_have_a_size_only_where_one_pool_has_pages() -> None:
    assert size_of_process_pages([2 * MiB]) == 2 * MiB
    assert size_of_process_pages([]) is None
    assert size_of_process_pages([2 * MiB, GiB]) is None  # status does not split them: left out (high)


def test_each_pods_pages_are_counted_once_whichever_way_they_are_found() -> None:
    two = 2 * MiB
    files = {"vm-on-emptydir": {two: 64}, "dpdk-files-kept": {two: 32}}
    processes = {
        "vm-on-emptydir": {two: 64},  # QEMU maps its emptyDir file: the same 64 pages
        "vm-memory-only": {two: 48},  # guest RAM on the runtime's own hugetlbfs: no emptyDir
    }
    assert pods_pages(files, processes) == {two: 64 + 32 + 48}
    # A pod whose process maps part of a bigger file: the file's pages; the other way round, the process's.
    assert pods_pages({"a": {two: 10}}, {"a": {two: 4}}) == {two: 10}
    assert pods_pages({"a": {two: 4}}, {"a": {two: 10}}) == {two: 10}
    assert pods_pages({}, {}) == {}
