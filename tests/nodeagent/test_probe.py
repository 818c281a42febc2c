"""Fixture trees -> exact records: cgroup v2, v1 and hybrid, two NUMA nodes, 1Gi pages, missing files,
and the fallback to HugePages emptyDirs when the hugetlb controller is off (containerd's default)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from extender.core.nodeagent.counters import KernelPool
from extender.shell.nodeagent import probe
from extender.shell.nodeagent.probe import Roots, read_record

MiB, GiB = 1 << 20, 1 << 30
NOW = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def pool_files(base: str, kb: int, *, nr: int, free: int, surplus: int = 0, resv: int | None = None) -> dict[str, str]:
    d = f"{base}/hugepages-{kb}kB"
    files = {
        f"{d}/nr_hugepages": f"{nr}\n",
        f"{d}/free_hugepages": f"{free}\n",
        f"{d}/surplus_hugepages": f"{surplus}\n",
    }
    if resv is not None:
        files[f"{d}/resv_hugepages"] = f"{resv}\n"
        files[f"{d}/nr_overcommit_hugepages"] = "0\n"
    return files


GLOBAL = "sys/kernel/mm/hugepages"
NODES = "sys/devices/system/node"

# Two NUMA nodes, 2 MiB and 1 GiB pages:
#   2Mi: 512 pages (256 per node); 160 free (100 + 60); 10 reserved -> committed 512 - 160 + 10 = 362
#   1Gi: 4 pages (2 per node); 1 free (on node 1); 0 reserved -> committed 3
TWO_NUMA_SYSFS: dict[str, str] = {
    **pool_files(GLOBAL, 2048, nr=512, free=160, resv=10),
    **pool_files(GLOBAL, 1048576, nr=4, free=1, resv=0),
    f"{NODES}/online": "0-1\n",
    **pool_files(f"{NODES}/node0/hugepages", 2048, nr=256, free=100),
    **pool_files(f"{NODES}/node1/hugepages", 2048, nr=256, free=60),
    **pool_files(f"{NODES}/node0/hugepages", 1048576, nr=2, free=0),
    **pool_files(f"{NODES}/node1/hugepages", 1048576, nr=2, free=1),
}


def figures(total: int, free: int, reserved: int | None, pods: int | None, outside: int | None) -> dict[str, Any]:
    return {
        "totalPages": total,
        "freePages": free,
        "reservedPages": reserved,
        "surplusPages": 0,
        "podPages": pods,
        "outsidePages": outside,
    }


def record(root: Path, **roots: Path) -> dict[str, Any]:
    found = read_record(
        "node-a",
        Roots(sysfs=root / "sys", cgroup=roots.get("cgroup", root / "cgroup"), kubelet=root / "kubelet",
              mountinfo=roots.get("mountinfo", root / "mountinfo"), proc=roots.get("proc", root / "proc")),
        now=lambda: NOW,
    )  # fmt: skip
    return found.as_json()


def test_cgroup_v2_two_numa_nodes_two_page_sizes(tmp_path: Path) -> None:
    # Pods hold 300 pages of 2 MiB (600 MiB; 290 faulted + 10 reserved), 200 on node 0 and 100 on node 1,
    # and 2 pages of 1 GiB, both on node 0. So outside pods: 2Mi 362 - 300 = 62; 1Gi 3 - 2 = 1.
    kubepods = "cgroup/kubepods.slice"
    write_tree(
        tmp_path,
        {
            **TWO_NUMA_SYSFS,
            "cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids\n",
            f"{kubepods}/hugetlb.2MB.current": f"{290 * 2 * MiB}\n",
            f"{kubepods}/hugetlb.2MB.rsvd.current": f"{300 * 2 * MiB}\n",
            f"{kubepods}/hugetlb.2MB.numa_stat": f"total={290 * 2 * MiB} N0={200 * 2 * MiB} N1={90 * 2 * MiB}\n",
            f"{kubepods}/hugetlb.1GB.current": f"{2 * GiB}\n",
            f"{kubepods}/hugetlb.1GB.rsvd.current": f"{2 * GiB}\n",
            f"{kubepods}/hugetlb.1GB.numa_stat": f"total={2 * GiB} N0={2 * GiB} N1=0\n",
        },
    )
    assert record(tmp_path) == {
        "node": "node-a",
        "observedAt": "2026-11-30T12:00:00Z",
        "source": "cgroup-v2",
        "pageSizes": {
            "hugepages-1Gi": {
                **figures(4, 1, 0, 2, 1),
                "numa": {
                    "0": figures(2, 0, None, 2, 0),  # 2 - 0 - 2
                    "1": figures(2, 1, None, 0, 1),  # 2 - 1 - 0
                },
            },
            "hugepages-2Mi": {
                **figures(512, 160, 10, 300, 62),
                "numa": {
                    "0": figures(256, 100, None, 200, 0),  # 256 - 100 - 200 < 0: floored
                    "1": figures(256, 60, None, 90, 106),  # 256 - 60 - 90
                },
            },
        },
    }


def test_cgroup_v1_with_cgroupfs_driver(tmp_path: Path) -> None:
    # v1: usage 100 pages, rsvd 110 pages (10 unfaulted: the kernel's resv) -> pods 110; outside 362 - 110 = 252 (2Mi).
    hugetlb = "cgroup/hugetlb/kubepods"
    write_tree(
        tmp_path,
        {
            **TWO_NUMA_SYSFS,
            f"{hugetlb}/hugetlb.2MB.usage_in_bytes": f"{100 * 2 * MiB}\n",
            f"{hugetlb}/hugetlb.2MB.rsvd.usage_in_bytes": f"{110 * 2 * MiB}\n",
            f"{hugetlb}/hugetlb.2MB.numa_stat": (
                f"total=0 N0=0 N1=0\nhierarchical_total={100 * 2 * MiB} N0={100 * 2 * MiB} N1=0\n"
            ),
            f"{hugetlb}/hugetlb.1GB.usage_in_bytes": "0\n",
            f"{hugetlb}/hugetlb.1GB.rsvd.usage_in_bytes": "0\n",
        },
    )
    got = record(tmp_path)
    assert got["source"] == "cgroup-v1"
    assert got["pageSizes"]["hugepages-2Mi"] == {
        **figures(512, 160, 10, 110, 252),
        "numa": {"0": figures(256, 100, None, 100, 56), "1": figures(256, 60, None, 0, 196)},
    }
    # No numa_stat for 1GB (kernels before 5.10): per-NUMA pods' pages unknown, the node totals known.
    assert got["pageSizes"]["hugepages-1Gi"] == {
        **figures(4, 1, 0, 0, 3),
        "numa": {"0": figures(2, 0, None, None, None), "1": figures(2, 1, None, None, None)},
    }


def test_hybrid_hugetlb_only_on_the_unified_tree(tmp_path: Path) -> None:
    # This machine's layout: /sys/fs/cgroup is tmpfs with v1 controllers, hugetlb on unified/ (v2).
    write_tree(
        tmp_path,
        {
            **pool_files(GLOBAL, 2048, nr=64, free=40, resv=0),
            "cgroup/memory/kubepods/memory.usage_in_bytes": "0\n",
            "cgroup/unified/cgroup.controllers": "hugetlb\n",
            "cgroup/unified/kubepods/hugetlb.2MB.current": f"{16 * 2 * MiB}\n",
            "cgroup/unified/kubepods/hugetlb.2MB.rsvd.current": f"{16 * 2 * MiB}\n",
        },
    )
    got = record(tmp_path)
    assert got["source"] == "cgroup-v2"
    assert got["pageSizes"] == {"hugepages-2Mi": {**figures(64, 40, 0, 16, 8), "numa": {}}}  # 24 - 16


def test_controller_off_falls_back_to_hugepages_emptydirs(tmp_path: Path) -> None:
    # containerd's disable_hugetlb_controller: the kubepods cgroup exists, no hugetlb files.
    # A pod's 2Mi emptyDir holds two files of 3 and 1 pages; a 1Gi emptyDir one file of 1 page;
    # a tmpfs emptyDir is not counted. Blocks are what a file holds (written here: st_blocks is
    # what this file system gives them).
    pods = tmp_path / "kubelet" / "pods"
    mounts = {
        pods / "uid-1/volumes/kubernetes.io~empty-dir/hugepage-2mi": ("hugetlbfs", "pagesize=2M"),
        pods / "uid-2/volumes/kubernetes.io~empty-dir/hugepage-1gi": ("hugetlbfs", "pagesize=1024M"),
        pods / "uid-2/volumes/kubernetes.io~empty-dir/cache": ("tmpfs", "size=1g"),
    }
    for directory in mounts:
        directory.mkdir(parents=True)
    write_tree(
        tmp_path,
        {**TWO_NUMA_SYSFS, "cgroup/cgroup.controllers": "cpu memory pids\n", "cgroup/kubepods/cpu.max": "max\n"},
    )
    (tmp_path / "mountinfo").write_text(
        "\n".join(
            f"{600 + i} 30 0:{80 + i} / {d} rw - {fs} nodev rw,{opts}"
            for i, (d, (fs, opts)) in enumerate(mounts.items())
        )
    )
    blocks = {"hugepage-2mi/a": 3 * 4096, "hugepage-2mi/b": 4096, "hugepage-1gi/vm": 2 * 1024 * 1024, "cache/x": 4096}
    stat_blocks = {}
    for name, count in blocks.items():
        directory = next(d for d in mounts if d.name == name.split("/")[0])
        path = directory / name.split("/")[1]
        path.write_bytes(b"x" * (count * 512))  # real blocks on the test's file system
        stat_blocks[name] = os.lstat(path).st_blocks
    got = record(tmp_path)
    assert got["source"] == "hugetlbfs-emptydir"
    pages_2m = -(-stat_blocks["hugepage-2mi/a"] * 512 // (2 * MiB)) + -(
        -stat_blocks["hugepage-2mi/b"] * 512 // (2 * MiB)
    )
    assert pages_2m == 4
    assert got["pageSizes"]["hugepages-2Mi"]["podPages"] == 4
    assert got["pageSizes"]["hugepages-2Mi"]["outsidePages"] == 362 - 4
    # A file system may give a 1 GiB file a few blocks more than its data (metadata, preallocation):
    # those make a second page, as a partly used page would on hugetlbfs.
    pages_1g = -(-stat_blocks["hugepage-1gi/vm"] * 512 // GiB)
    assert pages_1g in (1, 2)
    assert got["pageSizes"]["hugepages-1Gi"]["podPages"] == pages_1g
    assert got["pageSizes"]["hugepages-1Gi"]["outsidePages"] == max(0, 3 - pages_1g)
    # No per-NUMA split from files.
    assert got["pageSizes"]["hugepages-2Mi"]["numa"]["0"]["podPages"] is None


def test_nothing_to_read_pods_pages_says_none(tmp_path: Path) -> None:
    write_tree(tmp_path, pool_files(GLOBAL, 2048, nr=8, free=8, resv=0))
    got = record(tmp_path)
    assert got["source"] == "none"
    assert got["pageSizes"] == {"hugepages-2Mi": {**figures(8, 8, 0, None, None), "numa": {}}}


@pytest.mark.parametrize(
    ("case", "drop", "expected_sizes"),
    [
        (
            "no free_hugepages: that page size is left out",
            f"{GLOBAL}/hugepages-1048576kB/free_hugepages",
            ["hugepages-2Mi"],
        ),
        (
            "no resv_hugepages (read as 0)",
            f"{GLOBAL}/hugepages-2048kB/resv_hugepages",
            ["hugepages-1Gi", "hugepages-2Mi"],
        ),
        ("no NUMA online list: nodes found by directory", f"{NODES}/online", ["hugepages-1Gi", "hugepages-2Mi"]),
    ],
)
def test_missing_files(tmp_path: Path, case: str, drop: str, expected_sizes: list[str]) -> None:
    write_tree(tmp_path, TWO_NUMA_SYSFS)
    (tmp_path / drop).unlink()
    got = record(tmp_path)
    assert sorted(got["pageSizes"]) == expected_sizes, case
    assert sorted(got["pageSizes"]["hugepages-2Mi"]["numa"]) == ["0", "1"], case


def test_missing_charge_file_for_one_size_is_not_a_source(tmp_path: Path) -> None:
    # The v2 tree lacks hugetlb.1GB.current: the controller is not (fully) on there; nothing
    # else is readable either, so the record says so rather than guess.
    write_tree(
        tmp_path,
        {
            **TWO_NUMA_SYSFS,
            "cgroup/cgroup.controllers": "hugetlb\n",
            "cgroup/kubepods.slice/hugetlb.2MB.current": "0\n",
        },
    )
    got = record(tmp_path)
    assert got["source"] == "none"
    assert got["pageSizes"]["hugepages-2Mi"]["outsidePages"] is None


def test_garbage_in_a_counter_leaves_that_size_out(tmp_path: Path) -> None:
    write_tree(tmp_path, {**TWO_NUMA_SYSFS, f"{GLOBAL}/hugepages-2048kB/nr_hugepages": "NaN\n"})
    assert sorted(record(tmp_path)["pageSizes"]) == ["hugepages-1Gi"]


def test_once_prints_the_record_and_publishes_nothing(tmp_path: Path) -> None:
    write_tree(tmp_path, {**TWO_NUMA_SYSFS, "cgroup/cgroup.controllers": "hugetlb\n"})
    (tmp_path / "cgroup/kubepods").mkdir()
    for size in ("2MB", "1GB"):
        (tmp_path / f"cgroup/kubepods/hugetlb.{size}.current").write_text("0\n")
    out = subprocess.run(
        [sys.executable, "-m", "extender", "node-agent", "--node-name", "node-a", "--once", "--output", "json",
         "--sysfs-root", str(tmp_path / "sys"), "--cgroup-root", str(tmp_path / "cgroup")],
        check=True, capture_output=True, text=True, env={**os.environ, "KUBECONFIG": "/nonexistent"},
    )  # fmt: skip
    printed = json.loads(out.stdout)
    assert printed["node"] == "node-a"
    assert printed["source"] == "cgroup-v2"
    dt.datetime.fromisoformat(printed["observedAt"])
    assert printed["pageSizes"]["hugepages-2Mi"]["outsidePages"] == 362
    assert printed["pageSizes"]["hugepages-1Gi"]["outsidePages"] == 3


def test_a_kubelet_with_its_own_cgroup_root(tmp_path: Path) -> None:
    # kubelet --cgroup-root=/k8s (cgroupfs driver): pods below k8s/kubepods, named with a flag.
    write_tree(
        tmp_path,
        {
            **pool_files(GLOBAL, 2048, nr=64, free=40, resv=0),
            "cgroup/cgroup.controllers": "hugetlb\n",
            "cgroup/k8s/kubepods/hugetlb.2MB.current": f"{20 * 2 * MiB}\n",
        },
    )
    roots = Roots(
        sysfs=tmp_path / "sys", cgroup=tmp_path / "cgroup", kubepods=("k8s/kubepods",), proc=tmp_path / "proc"
    )
    found = read_record("node-a", roots, now=lambda: NOW)
    assert found.source.value == "cgroup-v2"
    assert found.size_reports["hugepages-2Mi"].figures.outside_pages == 4  # 24 - 20
    assert record(tmp_path)["source"] == "none"  # not found where the kubelet puts them by default


# -- pages that move while the files are read ----------------------------------------------
# The files are not read at one instant. 64 pages, 24 committed, 16 of them the pods':
# 8 outside pods, before and after a pod takes (or gives back) 8 pages in the middle of
# a read. A record may say more than 8 (until the next read), never less: less is room
# offered that the kernel does not have.
STILL: dict[str, str] = {
    **pool_files(GLOBAL, 2048, nr=64, free=40, resv=0),
    "cgroup/cgroup.controllers": "hugetlb\n",
    "cgroup/kubepods/hugetlb.2MB.current": f"{16 * 2 * MiB}\n",
    "cgroup/kubepods/hugetlb.2MB.rsvd.current": f"{16 * 2 * MiB}\n",
}


def pod_pages_change(root: Path, pages: int) -> None:
    """A pod takes ``pages`` (negative: gives them back), faulted in: the kernel's free pages and
    the pods' charges move together."""
    free = root / GLOBAL / "hugepages-2048kB/free_hugepages"
    free.write_text(f"{int(free.read_text()) - pages}\n")
    for charge in ("current", "rsvd.current"):
        path = root / f"cgroup/kubepods/hugetlb.2MB.{charge}"
        path.write_text(f"{int(path.read_text()) + pages * 2 * MiB}\n")


def outside_while(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, move: Callable[[int], int]) -> int:
    """The record's outside pages when, around the n-th reading of the kernel's counters, a pod
    takes ``move(n)`` pages; what the next read says is exact."""
    write_tree(tmp_path, STILL)
    read_kernel = probe.kernel_pools
    readings = 0

    def kernel_pools_while_a_pod_moves(sysfs: Path) -> dict[int, KernelPool]:
        nonlocal readings
        readings += 1
        pod_pages_change(tmp_path, move(readings))
        return read_kernel(sysfs)

    monkeypatch.setattr(probe, "kernel_pools", kernel_pools_while_a_pod_moves)
    outside: int = record(tmp_path)["pageSizes"]["hugepages-2Mi"]["outsidePages"]
    monkeypatch.undo()
    assert record(tmp_path)["pageSizes"]["hugepages-2Mi"]["outsidePages"] == 8, "the next read is exact"
    return outside


@pytest.mark.parametrize(
    ("pages", "at_reading"),
    [
        pytest.param(8, 1, id="a pod takes pages while the kernel's counters are read the first time"),
        pytest.param(8, 2, id="a pod takes pages while the kernel's counters are read again"),
        pytest.param(-8, 1, id="a pod gives pages back while the kernel's counters are read the first time"),
        pytest.param(-8, 2, id="a pod gives pages back while the kernel's counters are read again"),
    ],
)
def test_pages_moved_once_during_a_read_give_that_instants_exact_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pages: int, at_reading: int
) -> None:
    assert outside_while(tmp_path, monkeypatch, lambda n: pages if n == at_reading else 0) == 8


def test_pages_moving_throughout_a_read_err_high(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Taken before every odd reading, given back before every even one: no two readings agree.
    # The most committed (32) less the fewest pods' pages (16).
    assert outside_while(tmp_path, monkeypatch, lambda n: 8 if n % 2 else -8) == 16
    # Taken before every reading: committed 32, 40, 48, 56; pods' pages 16 (before) to 48.
    assert outside_while(tmp_path, monkeypatch, lambda n: 8) == 56 - 16


@pytest.mark.parametrize("counter", ["nr_hugepages", "free_hugepages", "surplus_hugepages", "resv_hugepages"])
def test_a_page_faulted_in_while_the_pool_is_read_never_lowers_what_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counter: str
) -> None:
    # 8 pages reserved by a mapping, none faulted: committed 64 - 64 + 8 = 8 outside pods.
    # A fault just after one counter is read lowers free and resv together.
    write_tree(tmp_path, pool_files(GLOBAL, 2048, nr=64, free=64, resv=8))
    directory = tmp_path / GLOBAL / "hugepages-2048kB"
    read_count = probe._count
    faulted = False

    def count_while_a_page_faults(path: Path) -> int | None:
        nonlocal faulted
        value = read_count(path)
        if path == directory / counter:
            faulted = True
            for name in ("free_hugepages", "resv_hugepages"):
                (directory / name).write_text(f"{int((directory / name).read_text()) - 1}\n")
        return value

    monkeypatch.setattr(probe, "_count", count_while_a_page_faults)
    pool = probe.kernel_pools(tmp_path / "sys")[2 * MiB]
    assert faulted
    assert pool.committed >= 8, pool


# -- the pods' own processes, where the controller is off ------------------------------------
VM_UID = "11111111-2222-4333-8444-555555555555"
DPDK_UID = "66666666-7777-4888-9999-aaaaaaaaaaaa"


def process_files(pid: int, hugetlb_kb: int | None, cgroup: str) -> dict[str, str]:
    status = f"Name:\tp{pid}\nVmRSS:\t  1024 kB\n"
    if hugetlb_kb is not None:
        status += f"HugetlbPages:\t{hugetlb_kb:8d} kB\n"
    return {f"proc/{pid}/status": status, f"proc/{pid}/cgroup": cgroup}


def pod_cgroup(uid: str) -> str:
    slice_ = f"kubelet-kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
    return f"4:memory:/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/{slice_}/cri-x.scope\n"


def test_controller_off_a_pods_pages_are_its_own_whichever_way_they_are_found(tmp_path: Path) -> None:
    # The pool: 512 pages, 352 free: 160 committed. A DPDK pod keeps 32 pages in files on its
    # HugePages emptyDir and its process maps them (once, not twice); a VM pod that requests only
    # memory has its guest RAM (64 pages) on a hugetlbfs of its own, in no emptyDir: only its
    # process says so. A process outside pods holds the other 64. A kernel thread has no memory.
    pods = tmp_path / "kubelet" / "pods"
    emptydir = pods / DPDK_UID / "volumes/kubernetes.io~empty-dir/hugepages"
    emptydir.mkdir(parents=True)
    (emptydir / "rtemap_0").write_bytes(b"x" * 4096)
    file_pages = -(-os.lstat(emptydir / "rtemap_0").st_blocks * 512 // (2 * MiB))
    assert file_pages == 1  # st_blocks on the test's file system: one page's worth; the process says 32
    write_tree(
        tmp_path,
        {
            **pool_files(GLOBAL, 2048, nr=512, free=352, resv=0),
            **pool_files(GLOBAL, 1048576, nr=0, free=0, resv=0),  # a size with no pool: not in the way
            "cgroup/cgroup.controllers": "cpu memory pids\n",
            **process_files(101, 32 * 2048, pod_cgroup(DPDK_UID)),
            **process_files(102, 0, pod_cgroup(DPDK_UID)),  # the pod's shell: no pages
            **process_files(201, 64 * 2048, pod_cgroup(VM_UID)),
            **process_files(301, 64 * 2048, "4:memory:/system.slice/ovs-vswitchd.service\n0::/\n"),
            **process_files(2, None, "0::/\n"),
            "proc/self/status": "HugetlbPages:\t 999999 kB\n",  # not a PID: not read
        },
    )
    (tmp_path / "mountinfo").write_text(f"600 30 0:80 / {emptydir} rw - hugetlbfs nodev rw,pagesize=2M\n")
    got = record(tmp_path)
    assert got["source"] == "hugetlbfs-emptydir"
    assert got["pageSizes"]["hugepages-2Mi"]["podPages"] == 32 + 64
    assert got["pageSizes"]["hugepages-2Mi"]["outsidePages"] == 64  # the host process's only


def test_controller_off_processes_pages_of_an_untold_size_are_left_out(tmp_path: Path) -> None:
    # Pools of two sizes: /proc/<pid>/status does not say which size a process's pages are of, so
    # they count outside pods (too many outside, never too few).
    (tmp_path / "kubelet" / "pods").mkdir(parents=True)
    write_tree(
        tmp_path,
        {
            **pool_files(GLOBAL, 2048, nr=512, free=448, resv=0),
            **pool_files(GLOBAL, 1048576, nr=2, free=2, resv=0),
            "cgroup/cgroup.controllers": "cpu memory pids\n",
            **process_files(201, 64 * 2048, pod_cgroup(VM_UID)),
        },
    )
    (tmp_path / "mountinfo").write_text("")
    got = record(tmp_path)
    assert got["pageSizes"]["hugepages-2Mi"]["podPages"] == 0
    assert got["pageSizes"]["hugepages-2Mi"]["outsidePages"] == 64


def test_controller_off_a_file_counts_once_whatever_its_names_or_mounts(tmp_path: Path) -> None:
    """Issue 29: in a pod's hugetlbfs emptyDir, 410 hard links to one file holding one page made the
    agent report 411 pod pages and 1 outside page where the truth was 1 and 411. Here one page in a
    file with 410 more names, the emptyDir listed again at another pod's path (a bind mount shows the
    same files): 1 page of the pods, the other 411 of the 412 committed outside them."""
    pods = tmp_path / "kubelet" / "pods"
    emptydir = pods / DPDK_UID / "volumes/kubernetes.io~empty-dir/hugepages"
    emptydir.mkdir(parents=True)
    (emptydir / "rtemap_0").write_bytes(b"x" * 4096)  # one page's worth of blocks (the test above)
    for i in range(410):
        os.link(emptydir / "rtemap_0", emptydir / f"link_{i}")
    other = pods / VM_UID / "volumes/kubernetes.io~empty-dir/hugepages"
    other.parent.mkdir(parents=True)
    other.symlink_to(emptydir)  # what a bind mount of it shows: the same device and inodes
    write_tree(
        tmp_path,
        {**pool_files(GLOBAL, 2048, nr=512, free=100, resv=0), "cgroup/cgroup.controllers": "cpu memory pids\n"},
    )
    (tmp_path / "proc").mkdir()
    (tmp_path / "mountinfo").write_text(
        f"600 30 0:80 / {emptydir} rw - hugetlbfs nodev rw,pagesize=2M\n"
        f"601 30 0:80 / {other} rw - hugetlbfs nodev rw,pagesize=2M\n"
    )
    got = record(tmp_path)
    assert got["source"] == "hugetlbfs-emptydir"
    assert got["pageSizes"]["hugepages-2Mi"]["podPages"] == 1
    assert got["pageSizes"]["hugepages-2Mi"]["outsidePages"] == 411
