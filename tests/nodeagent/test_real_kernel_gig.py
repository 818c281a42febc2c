"""1 GiB pages on this machine's own kernel: root sizes the 1 GiB pool by two pages (restored
afterwards; the 2 MiB pool is never touched), holds one page outside any pod and one from inside a
(made-up) kubepods cgroup; the agent's record counts them under ``hugepages-1Gi``, and an extender
guarding both sizes reads that record into its 1 GiB accounts and filters by it.

Skipped, by name, only where the kernel refuses: no 1 GiB page size, or fewer than two pages given.
Relative throughout, like the 2 MiB test beside it. On a shared machine run it under the 1 GiB pool's
lock (``flock /work/locks/gig.lock``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from extender.core.answer import Reasons
from extender.core.config import build_config
from extender.core.nodeagent.record import NodeRecord
from extender.shell.nodeagent.probe import Roots, read_record
from extender.state.cluster import ClusterState
from extender.state.verbs import ExtenderVerbs
from tests.conftest import make_node, make_pod
from tests.nodeagent.test_real_kernel import _v2_tree_with_hugetlb, kubepods_cgroup

GIB = 1 << 30
RESOURCE = "hugepages-1Gi"
GIG_POOL = Path("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages")
COMPACT = Path("/proc/sys/vm/compact_memory")
MAP_HUGETLB = 0x40000
MAP_HUGE_1GB = 30 << 26  # log2(1 GiB) << MAP_HUGE_SHIFT
ADDED = 2

POD_PROCESS = textwrap.dedent(
    """
    import mmap, os, sys
    open(sys.argv[1], "w").write(str(os.getpid()))  # into the kubepods cgroup, then fault the page
    held = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000 | (30 << 26))
    held[0] = 1
    print("held", flush=True)
    sys.stdin.read()
    """
)


@contextlib.contextmanager
def sized_gig_pool(extra: int) -> Iterator[int]:
    """The 1 GiB pool grown by ``extra`` pages; put back afterwards. Yields its size then."""
    if not GIG_POOL.exists():
        pytest.skip("the kernel has no 1 GiB page size (no hugepages-1048576kB)")
    saved = int(GIG_POOL.read_text())
    try:
        GIG_POOL.write_text(f"{saved + extra}\n")
    except OSError as error:
        pytest.skip(f"the kernel refused to size the 1 GiB pool: {error}")
    got = int(GIG_POOL.read_text())
    if got < saved + extra:
        # A 1 GiB page needs 1 GiB of contiguous memory: compact once, and ask again.
        with contextlib.suppress(OSError):
            COMPACT.write_text("1\n")
            GIG_POOL.write_text(f"{saved + extra}\n")
        got = int(GIG_POOL.read_text())
    try:
        if got < saved + extra:
            pytest.skip(f"the kernel gave {got - saved} of {extra} more 1 GiB pages (memory fragmented)")
        yield got
    finally:
        now = int(GIG_POOL.read_text())
        # Someone else may have sized it meanwhile: take back only what this test added.
        GIG_POOL.write_text(f"{saved if now == got else max(0, now - (got - saved))}\n")


def gig(record: NodeRecord) -> tuple[int, int | None, int | None]:
    """(pool, outside pods, pods) of the 1 GiB size, in pages."""
    figures = record.size_reports[RESOURCE].figures
    return figures.total_pages, figures.outside_pages, figures.pod_pages


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="needs root on Linux to size the pool")
def test_one_gib_pages_are_counted_by_the_agent_and_guarded_by_the_extender(tmp_path: Path) -> None:
    tree = _v2_tree_with_hugetlb()
    if tree is None:
        pytest.skip("no cgroup v2 tree with the hugetlb controller")
    with sized_gig_pool(ADDED) as pool, kubepods_cgroup(tree, tmp_path) as (cgroup_root, kubepods):
        roots = Roots(cgroup=cgroup_root)
        before = read_record("this-node", roots)
        assert before.source.value == "cgroup-v2"
        total, outside0, pods0 = gig(before)
        assert (total, pods0) == (pool, 0)
        assert outside0 is not None

        # A page held outside any pod (a VM, a DPDK process started by hand).
        held = mmap.mmap(-1, GIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_1GB)
        pod = None
        try:
            held[0] = 1
            assert gig(read_record("this-node", roots)) == (pool, outside0 + 1, 0)
            # A page a pod holds is the pod's, not an outside one.
            pod = subprocess.Popen(
                [sys.executable, "-c", POD_PROCESS, str(kubepods / "cgroup.procs")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert pod.stdout is not None
            assert pod.stdout.readline().strip() == "held"
            record = read_record("this-node", roots)
            assert gig(record) == (pool, outside0 + 1, 1)
        finally:
            if pod is not None:
                pod.communicate(timeout=30)  # closes stdin: the "pod" exits and its page is freed
            held.close()
        assert gig(read_record("this-node", roots)) == (pool, outside0, 0)

    # The extender, guarding both sizes, reads the record into its 1 GiB accounts: a node whose kubelet
    # offers the whole pool to pods has outside0 + 1 pages held outside pods, the pod's page is its own.
    config = build_config(
        {"resourceNames": ["hugepages-2Mi", RESOURCE], "defaults": {"mode": "enforce", "sampleSize": 0}}, {}
    )
    state = ClusterState(config)
    state.replace([make_node("this-node", hugepages=f"{pool}Gi", resource=RESOURCE)], [])
    state.apply_report(*state.report_record("this-node", msgspec.json.encode(record.report_json())))
    account = state.books[RESOURCE].accounts["this-node"]
    assert (account.page_size, account.total_pages, account.outside_pods_pages) == (GIB, pool, outside0 + 1)
    verbs = ExtenderVerbs(config, state)
    room = pool - outside0 - 1  # what the pages held outside pods leave
    fits = verbs.filter_pod(make_pod("fits", hugepages=f"{room}Gi", resource=RESOURCE), ["this-node"])
    assert list(fits.decision.passed) == ["this-node"]
    too_big = verbs.filter_pod(make_pod("too-big", hugepages=f"{room + 1}Gi", resource=RESOURCE), ["this-node"])
    assert too_big.decision.unresolvable == {"this-node": Reasons.for_resource(RESOURCE).held_outside}
