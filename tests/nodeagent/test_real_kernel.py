"""The agent against this machine's own kernel: root sizes the 2 MiB pool, holds pages from a process
outside any pod and from one inside a (made-up) kubepods cgroup, and the published record follows
within one report interval, up and back down; and while a "pod" there takes and gives back pages
every few milliseconds, no read counts fewer outside pages than are held.

Relative throughout: other work on the machine may size the pool or hold pages too, so the test
expects the outside pages to rise by exactly what it holds, from what the agent read just before.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from extender.core.nodeagent.record import NodeRecord
from extender.shell.nodeagent.probe import Roots, read_record
from extender.shell.nodeagent.publish import PublishPolicy, run

PAGE = 2 << 20
MAP_HUGETLB = 0x40000  # x86-64 and arm64
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
RESOURCE = "hugepages-2Mi"
INTERVAL = 0.2
MIN_INTERVAL = 0.2
SLACK = INTERVAL + MIN_INTERVAL + 1.0  # one read, one change write, and a loaded machine's scheduling
OUTSIDE, INSIDE = 6, 4  # pages held outside any pod, and by the "pod"


def _v2_tree_with_hugetlb() -> Path | None:
    for tree in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        with contextlib.suppress(OSError):
            if "hugetlb" in (tree / "cgroup.controllers").read_text().split():
                return tree
    return None


@contextlib.contextmanager
def sized_pool(extra: int) -> Iterator[int]:
    """The 2 MiB pool grown by ``extra`` pages; put back afterwards. Yields the pages added."""
    saved = int(NR_HUGEPAGES.read_text())
    wanted = saved + extra
    try:
        NR_HUGEPAGES.write_text(f"{wanted}\n")
    except OSError as error:
        pytest.skip(f"cannot size the 2 MiB pool: {error}")
    try:
        got = int(NR_HUGEPAGES.read_text())
        yield got - saved
    finally:
        now = int(NR_HUGEPAGES.read_text())
        # Someone else may have sized it meanwhile: take back only what this test added.
        NR_HUGEPAGES.write_text(f"{saved if now == got else max(0, now - (got - saved))}\n")


@contextlib.contextmanager
def kubepods_cgroup(tree: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A kubepods cgroup of the test's own, with the hugetlb controller on, on the real unified tree;
    yields (a cgroup root for the agent, the kubepods cgroup). Removed afterwards."""
    parent = tree / f"hugepage-extender-test-{os.getpid()}"
    kubepods = parent / "kubepods"
    control = tree / "cgroup.subtree_control"
    enabled_before = "hugetlb" in control.read_text().split()
    try:
        if not enabled_before:
            control.write_text("+hugetlb\n")
        parent.mkdir()
        (parent / "cgroup.subtree_control").write_text("+hugetlb\n")
        kubepods.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a hugetlb cgroup on {tree}: {error}")
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "unified").symlink_to(parent)
    try:
        yield root, kubepods
    finally:
        for path in (kubepods, parent):
            with contextlib.suppress(OSError):
                path.rmdir()
        if not enabled_before:
            with contextlib.suppress(OSError):
                control.write_text("-hugetlb\n")


@contextlib.contextmanager
def pool_and_kubepods(tmp_path: Path, pages: int) -> Iterator[tuple[Roots, Path]]:
    """The 2 MiB pool grown by ``pages`` + 4 and a kubepods cgroup of the test's own (skips where the
    machine has neither); yields (the agent's roots, the kubepods cgroup)."""
    tree = _v2_tree_with_hugetlb()
    if tree is None:
        pytest.skip("no cgroup v2 tree with the hugetlb controller")
    with sized_pool(pages + 4) as added, kubepods_cgroup(tree, tmp_path) as (cgroup_root, kubepods):
        if added < pages:
            pytest.skip(f"the kernel gave only {added} more 2 MiB pages (memory fragmented)")
        yield Roots(cgroup=cgroup_root), kubepods


def hold(pages: int) -> mmap.mmap:
    """Hold ``pages`` 2 MiB pages from this process (outside any pod): a private hugetlb mapping, touched."""
    held = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB)
    for page in range(pages):
        held[page * PAGE] = 1
    return held


POD_PROCESS = textwrap.dedent(
    """
    import mmap, os, sys
    open(sys.argv[1], "w").write(str(os.getpid()))  # into the kubepods cgroup, then fault the pages
    pages = int(sys.argv[2])
    held = mmap.mmap(-1, pages * (2 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)
    for page in range(pages):
        held[page * (2 << 20)] = 1
    print("held", flush=True)
    sys.stdin.read()
    """
)


class Published:
    """What the agent's loop wrote, with when (the loop's publisher, in memory: the API is the cluster tests')."""

    def __init__(self) -> None:
        self.records: list[tuple[float, NodeRecord]] = []
        self._lock = threading.Lock()

    def publish(self, record: NodeRecord) -> None:
        with self._lock:
            self.records.append((time.monotonic(), record))

    def wait_for(self, what: str, check: Callable[[NodeRecord], bool], since: float, timeout: float = 10.0) -> float:
        """Seconds from ``since`` until a record written after it satisfies ``check``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for at, record in self.records:
                    if at >= since and check(record):
                        return at - since
            time.sleep(0.02)
        with self._lock:
            last = self.records[-1][1].size_reports.get(RESOURCE) if self.records else None
        raise AssertionError(f"no record with {what} within {timeout}s; last 2Mi figures: {last}")


def figures(record: NodeRecord) -> tuple[int | None, int | None]:
    size = record.size_reports[RESOURCE].figures
    return size.outside_pages, size.pod_pages


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="needs root on Linux to size the pool")
def test_outside_pages_follow_the_real_kernel(tmp_path: Path) -> None:
    with pool_and_kubepods(tmp_path, OUTSIDE + INSIDE) as (roots, kubepods):
        before = read_record("this-node", roots)
        assert before.source.value == "cgroup-v2"
        outside0, pods0 = figures(before)
        assert outside0 is not None
        assert pods0 == 0  # nothing runs in the test's own kubepods cgroup yet

        published = Published()
        stop = threading.Event()
        policy = PublishPolicy(heartbeat_seconds=3600, jitter=0.0, min_interval_seconds=MIN_INTERVAL)
        loop = threading.Thread(
            target=run,
            args=(lambda: read_record("this-node", roots), published),
            kwargs={"policy": policy, "interval_seconds": INTERVAL, "stop": stop},
            daemon=True,
        )
        loop.start()
        pod = None
        try:
            published.wait_for("a first record", lambda r: True, since=0.0)
            # Up: pages held outside any pod.
            held = hold(OUTSIDE)
            t0 = time.monotonic()
            took = published.wait_for(
                f"outside {outside0} + {OUTSIDE}", lambda r: figures(r)[0] == outside0 + OUTSIDE, t0
            )
            assert took <= SLACK

            # Pages a pod holds are the pod's, not outside ones.
            pod = subprocess.Popen(
                [sys.executable, "-c", POD_PROCESS, str(kubepods / "cgroup.procs"), str(INSIDE)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert pod.stdout is not None
            assert pod.stdout.readline().strip() == "held"
            t1 = time.monotonic()
            published.wait_for(
                f"pods {INSIDE}, outside unchanged",
                lambda r: figures(r) == (outside0 + OUTSIDE, INSIDE),
                t1,
            )

            # Down: the outside pages go back.
            held.close()
            t2 = time.monotonic()
            took = published.wait_for(f"outside back to {outside0}", lambda r: figures(r) == (outside0, INSIDE), t2)
            assert took <= SLACK
        finally:
            if pod is not None:
                pod.communicate(timeout=10)  # closes stdin: the "pod" exits and its pages are freed
            stop.set()
            loop.join(timeout=5)
        after = read_record("this-node", roots)
        assert figures(after) == (outside0, 0)


CHURNING_POD = textwrap.dedent(
    """
    import mmap, os, random, sys, time
    open(sys.argv[1], "w").write(str(os.getpid()))  # into the kubepods cgroup
    pages, seconds = int(sys.argv[2]), float(sys.argv[3])
    print("in", flush=True)
    cycles, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:  # pages taken, held a moment, given back, over and over
        held = mmap.mmap(-1, pages * (2 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)
        for page in range(pages):
            held[page * (2 << 20)] = 1
        time.sleep(random.uniform(0.002, 0.02))
        held.close()
        time.sleep(random.uniform(0.002, 0.02))
        cycles += 1
    print(cycles, flush=True)
    """
)
CHURN_PAGES, CHURN_SECONDS = 8, 3.0


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="needs root on Linux to size the pool")
def test_a_pod_taking_and_giving_back_pages_never_lowers_the_outside_pages(tmp_path: Path) -> None:
    # The files are read one after another, as fast as the agent can, while the "pod" maps and
    # faults 8 pages, holds them 2-20 ms, unmaps them and waits 2-20 ms, over and over: far more
    # often than pods start and stop. A read may count its pages as outside ones for a moment (too
    # high); a read that counts fewer outside pages than this process holds would offer room the
    # kernel does not have. (A process that maps and unmaps in a tight loop can show the same
    # numbers to every file read of a record at the same point of its cycle while its pages come
    # and go in between: no reading of separate files tells that apart from a still node.)
    with pool_and_kubepods(tmp_path, OUTSIDE + CHURN_PAGES) as (roots, kubepods):
        outside0, _ = figures(read_record("this-node", roots))
        assert outside0 is not None
        held = hold(OUTSIDE)
        try:
            with subprocess.Popen(
                [sys.executable, "-c", CHURNING_POD, str(kubepods / "cgroup.procs"), str(CHURN_PAGES),
                 str(CHURN_SECONDS)],
                stdout=subprocess.PIPE, text=True,
            ) as pod:  # fmt: skip
                assert pod.stdout is not None
                assert pod.stdout.readline().strip() == "in"
                seen: list[int] = []
                while pod.poll() is None:
                    outside, _ = figures(read_record("this-node", roots))
                    assert outside is not None
                    seen.append(outside)
                cycles = int(pod.stdout.read().strip())
        finally:
            held.close()
        low = [o for o in seen if o < outside0 + OUTSIDE]
        high = sum(o > outside0 + OUTSIDE for o in seen)
        print(f"\n{len(seen)} reads over {cycles} take-and-give-back cycles: {high} too high, {len(low)} too low")
        assert cycles > 10
        assert low == [], f"{len(low)} of {len(seen)} reads counted fewer outside pages than held: {sorted(low)[:10]}"


@contextlib.contextmanager
def mounted(source: str, target: Path, *options: str) -> Iterator[None]:
    target.mkdir(parents=True)
    try:
        subprocess.run(["mount", *options, source, str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"cannot mount {source} at {target}: {error}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(target)], check=False, capture_output=True)


def test_a_hugetlbfs_file_counts_once_whatever_its_names_or_mounts(tmp_path: Path) -> None:
    """Issue 29: in a pod's hugetlbfs emptyDir, 410 hard links to one file holding one page made the
    agent report 411 pod pages (and the pages held outside pods disappear). On a real hugetlbfs
    mounted as a pod's emptyDir, bind-mounted as another's too: one page, counted once."""
    pods = tmp_path / "kubelet" / "pods"
    emptydir = pods / "11111111-2222-4333-8444-555555555555" / "volumes/kubernetes.io~empty-dir/hp"
    other = pods / "66666666-7777-4888-9999-aaaaaaaaaaaa" / "volumes/kubernetes.io~empty-dir/hp"
    (tmp_path / "cgroup").mkdir()
    (tmp_path / "cgroup" / "cgroup.controllers").write_text("cpu memory pids\n")  # no hugetlb: emptyDirs
    (tmp_path / "proc").mkdir()  # no processes: the files alone
    roots = Roots(cgroup=tmp_path / "cgroup", kubelet=tmp_path / "kubelet", proc=tmp_path / "proc")
    with sized_pool(3) as added, mounted("none", emptydir, "-t", "hugetlbfs", "-o", "pagesize=2M"):
        if added < 2:
            pytest.skip(f"the kernel gave only {added} more 2 MiB pages")
        outside = hold(1)  # a page held outside any pod
        fd = os.open(emptydir / "rtemap_0", os.O_CREAT | os.O_RDWR)
        try:
            os.ftruncate(fd, PAGE)
            with mmap.mmap(fd, PAGE) as page:
                page[0] = 1  # the page is the file's now, mapped or not
        finally:
            os.close(fd)
        one = read_record("node-a", roots).size_reports[RESOURCE].figures
        for i in range(410):
            os.link(emptydir / "rtemap_0", emptydir / f"link_{i}")
        with mounted(str(emptydir), other, "--bind"):
            assert len(list(other.iterdir())) == 411
            many = read_record("node-a", roots).size_reports[RESOURCE].figures
        outside.close()
    assert one.pod_pages == 1, one
    assert one.outside_pages is not None
    assert one.outside_pages >= 1, one
    assert many.pod_pages == 1, many  # 411 by names, 822 with the bind mount
    assert many.outside_pages == one.outside_pages, (one, many)
