"""The reference cases of best-of-k-scoring.md, with exact values.

Pool: 1000 x 2 MiB pages = 2000 MiB. R = 4, alpha = 0.5 (reference defaults).
"""

import pytest

from extender.core.capacity import NodeAccount
from extender.core.columns import KEPT_TABLES, NodeColumns
from extender.core.namelist import NameList
from extender.core.podrequest import SizeNeed
from extender.core.policy import Policy
from extender.core.scoring import cpu_load, hugepage_load, node_load, priority
from tests.conftest import make_account

MiB = 1024 * 1024
PAGE = 2 * MiB
ON = Policy(overcommit_ratio=4.0, alpha=0.5, score_hugepages=True)
OFF = Policy(overcommit_ratio=4.0, alpha=0.5, score_hugepages=False)


def test_no_pool_scores_a_constant_half() -> None:
    # CPU: (1 + 2) / (4 * 4) = 3/16; no pool: 0.5; load = max = 0.5
    account = NodeAccount(cpu_millis=4000, cpu_requested_millis=2000)
    demand = SizeNeed(hugepage_bytes=512 * MiB, cpu_millis=1000)
    assert cpu_load(account, demand, 4.0) == 3 / 16
    assert node_load(account, demand, ON) == 0.5


def test_ordinary_ram_does_not_fill_the_pool() -> None:
    # empty pool, 512 MiB request: 512 / 2000
    assert hugepage_load(make_account(1000, cpus=8), SizeNeed(512 * MiB, 0), 0.5) == 512 / 2000


def test_tight_vs_roomy() -> None:
    demand = SizeNeed(512 * MiB, 0)
    # tight: 512 + (500 + 250) * 2 + 0.5 * 500 * 2 = 512 + 1500 + 500 = 2512 MiB of 2000
    assert hugepage_load(make_account(1000, used=500, reserved=250, cpus=8), demand, 0.5) == 2512 / 2000
    # roomy: 512 + 50 * 2 = 612 MiB of 2000
    assert hugepage_load(make_account(1000, reserved=50, cpus=8), demand, 0.5) == 612 / 2000


def test_pending_counts() -> None:
    demand = SizeNeed(512 * MiB, 0)
    idle = hugepage_load(make_account(1000, cpus=8), demand, 0.5)
    busy = hugepage_load(make_account(1000, held_mib=1024, cpus=8), demand, 0.5)
    assert busy - idle == pytest.approx(1024 / 2000)
    assert busy == (512 + 1024) / 2000


def test_flag_off_is_cpu_only() -> None:
    # CPU: (2 + 3) / (4 * 8) = 5/32 on both nodes, whatever their pools say
    demand = SizeNeed(512 * MiB, 2000)
    tight = NodeAccount(PAGE, 1000, 500, 250, 0, cpu_millis=8000, cpu_requested_millis=3000)
    roomy = NodeAccount(PAGE, 1000, 0, 50, 0, cpu_millis=8000, cpu_requested_millis=3000)
    assert node_load(tight, demand, OFF) == node_load(roomy, demand, OFF) == 5 / 32


def test_hugepage_scoring_takes_the_larger_load() -> None:
    demand = SizeNeed(512 * MiB, 2000)
    tight = NodeAccount(PAGE, 1000, 500, 250, 0, cpu_millis=8000, cpu_requested_millis=3000)
    assert node_load(tight, demand, ON) == max(5 / 32, 2512 / 2000)


def test_zero_cpus_is_never_preferred() -> None:
    assert cpu_load(NodeAccount(), SizeNeed(0, 100), 4.0) == float("inf")
    assert priority(node_load(NodeAccount(), SizeNeed(0, 100), ON)) == 0


@pytest.mark.parametrize(
    ("load", "score"),
    [(0.0, 10), (0.25, 8), (0.3, 7), (0.35, 7), (0.5, 5), (0.95, 1), (0.96, 0), (1.0, 0), (2.5, 0)],
)
def test_priority_is_round_10_times_headroom(load: float, score: int) -> None:
    # round half up, like Go's math.Round: 10 * (1 - 0.25) = 7.5 -> 8; 10 * 0.05 = 0.5 -> 1
    assert priority(load) == score


def test_slots_of_a_name_list_are_kept_until_a_node_gets_or_loses_a_slot() -> None:
    columns = NodeColumns()
    for name in ("a", "b", "c"):
        columns.put(name, make_account(1000, cpus=8))
    names = NameList.read(b'["c","a","x"]')
    assert names is not None
    first = columns.slots(names)
    assert first.tolist() == [3, 1, 0]  # slot 0: a node the extender does not know
    assert not first.flags.writeable
    columns.put("a", make_account(1000, used=500, cpus=8))  # a changed account keeps every slot
    assert columns.slots(names) is first
    assert columns.slots(["c", "a", "x"]) is not first  # only an immutable NameList is kept
    columns.put("x", make_account(1000, cpus=8))
    assert columns.slots(names).tolist() == [3, 1, 4]
    columns.drop("c")
    assert columns.slots(names).tolist() == [0, 1, 4]


def test_slots_are_kept_with_each_name_list_so_several_lists_interleave() -> None:
    columns = NodeColumns()
    for name in ("a", "b", "c"):
        columns.put(name, make_account(1000, cpus=8))
    lists = [NameList.read(json) for json in (b'["a","b"]', b'["b","c"]', b'["c","a"]')]
    assert all(names is not None for names in lists)
    first = [columns.slots(names) for names in lists if names is not None]
    assert [columns.slots(names) for names in lists if names is not None] == first  # the same arrays
    assert all(columns.slots(n) is f for n, f in zip(lists, first, strict=True) if n is not None)
    other = NodeColumns()  # another table's slots are its own
    other.put("c", make_account(1000, cpus=8))
    assert lists[1] is not None
    assert other.slots(lists[1]).tolist() == [0, 1]
    assert columns.slots(lists[1]) is first[1]  # kept beside the other table's (a size each)
    assert other.slots(lists[1]).tolist() == [0, 1]
    assert columns.slots(lists[1]).tolist() == [2, 3]


def test_a_name_list_keeps_the_slots_of_a_few_tables_at_most() -> None:
    names = NameList.read(b'["a","b"]')
    assert names is not None
    tables = [NodeColumns() for _ in range(KEPT_TABLES + 2)]
    for table in tables:
        table.put("b", make_account(1000, cpus=8))
        assert table.slots(names).tolist() == [0, 1]
    assert isinstance(names.memo, tuple)
    assert len(names.memo) == KEPT_TABLES  # the most recently read tables'
    assert tables[-1].slots(names) is names.memo[-1].slots
