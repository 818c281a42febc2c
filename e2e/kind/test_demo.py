"""``make demo``'s steps (e2e/kind/demo.py) on the suite's cluster, with no release installed
(conftest.py: after the secondary-mode uninstall): the chart installed with values-demo.yaml, a
VM and a DPDK pod ready on real hugepages, a pod that waits with the extender's reason, and
``kubectl hugepages explain`` for it, as the README says."""

from __future__ import annotations

from e2e.kind import demo
from e2e.kind.test_kind import pages_in_use, says_no_room


def test_the_demo_places_a_vm_and_dpdk_and_explains_the_pod_that_waits() -> None:
    before = pages_in_use()
    try:
        printed = demo.run()
        print(f"\n{printed}")
        # The VM's guest RAM and DPDK's memory: 2 x 64 pages of the host's pool, really taken.
        assert pages_in_use() - before >= 128, pages_in_use()
        lines = printed.splitlines()
        assert says_no_room(lines[1]), lines[1]
        assert any(line.startswith(f"pod {demo.DEMO}/{demo.WAITS}: needs") for line in lines), printed
        assert "mode enforce" in printed
    finally:
        demo.remove()
