"""The RFC's nodeHasCapacity, case by case. Pools in 2 MiB pages."""

import pytest

from extender.core.capacity import Fit, NodeAccount, fits, hugepages_for
from tests.conftest import make_account as pool  # pages of 2Mi: pool, used, reserved; held_mib in flight

MiB = 1024 * 1024
PAGE = 2 * MiB


@pytest.mark.parametrize(
    ("nbytes", "page", "pages"),
    [(0, PAGE, 0), (1, PAGE, 1), (PAGE, PAGE, 1), (PAGE + 1, PAGE, 2), (512 * MiB, PAGE, 256), (5, 0, 0)],
)
def test_hugepages_for_rounds_up(nbytes: int, page: int, pages: int) -> None:
    assert hugepages_for(nbytes, page) == pages


@pytest.mark.parametrize(
    ("case", "account", "need_mib", "verdict"),
    [
        ("a node the extender does not know: left to the scheduler", NodeAccount(), 512, Fit.UNKNOWN),
        ("page size 0 is a node not known", NodeAccount(total_pages=1000), 512, Fit.UNKNOWN),
        ("no pool: the kubelet reports none, or zero (unresolvable)", pool(0), 512, Fit.NO_POOL),
        ("empty pool of 1000 pages holds 256", pool(1000), 512, Fit.FITS),
        (
            "exactly full after placing: 1000 - 744 = 256 = need",
            pool(1000, used=500, reserved=244),
            512,
            Fit.FITS,
        ),
        ("near-full: 1000 - 745 = 255 < 256", pool(1000, used=500, reserved=245), 512, Fit.INSUFFICIENT),
        ("committed == total", pool(1000, used=1000), 2, Fit.INSUFFICIENT),
        ("over-committed pool", pool(1000, used=900, reserved=200), 2, Fit.INSUFFICIENT),
        ("in flight counts: 1000 - 500 < 256 + 250", pool(1000, used=500, held_mib=500), 512, Fit.INSUFFICIENT),
        (
            "in flight that still leaves room: 500 >= 256 + 244",
            pool(1000, used=500, held_mib=488),
            512,
            Fit.FITS,
        ),
        ("request larger than the whole pool: 1001 > 1000", pool(1000), 2002, Fit.EXCEEDS_POOL),
        ("whole pool exactly, empty", pool(1000), 2000, Fit.FITS),
        (
            "held outside pods leave 1000 - 300 = 700 < 701 (unresolvable)",
            pool(1000, reserved=300),
            1402,
            Fit.HELD_OUTSIDE,
        ),
        ("held outside pods leave 700 = need", pool(1000, reserved=300), 1400, Fit.FITS),
        (
            "pods' pages are resolvable: 1000 - 300 < 701, no outside",
            pool(1000, used=300),
            1402,
            Fit.INSUFFICIENT,
        ),
    ],
)
def test_fits(case: str, account: NodeAccount, need_mib: int, verdict: Fit) -> None:
    assert fits(account, need_mib * MiB) is verdict, case


def test_only_fits_and_unknown_admit() -> None:
    assert [f for f in Fit if f.admits] == [Fit.UNKNOWN, Fit.FITS]
    assert [f for f in Fit if f.unresolvable] == [Fit.NO_POOL, Fit.EXCEEDS_POOL, Fit.HELD_OUTSIDE]


@pytest.mark.parametrize(
    ("case", "account", "need_mib", "aligned", "verdict"),
    [
        ("best NUMA node has 300 >= 256", pool(1000, numa_free=300), 512, True, Fit.FITS),
        ("best NUMA node has 255 < 256, the node 1000", pool(1000, numa_free=255), 512, True, Fit.NUMA_INSUFFICIENT),
        ("not aligned: the whole pool counts", pool(1000, numa_free=255), 512, False, Fit.FITS),
        ("in flight counts on the NUMA node too: 300 < 256 + 50", pool(1000, numa_free=300, held_mib=100), 512, True,
         Fit.NUMA_INSUFFICIENT),
        ("no NUMA figures (-1): the whole pool", pool(1000, numa_free=-1), 512, True, Fit.FITS),
        ("the whole pool first: 1000 - 900 < 256", pool(1000, numa_free=500, used=900), 512, True, Fit.INSUFFICIENT),
    ],
)  # fmt: skip
def test_fits_numa_aligned(case: str, account: NodeAccount, need_mib: int, aligned: bool, verdict: Fit) -> None:
    assert fits(account, need_mib * MiB, numa_aligned=aligned) is verdict, case


def test_free_pages_never_negative() -> None:
    assert pool(1000, used=900, reserved=200).free_pages == 0
    assert pool(1000, used=100, held_mib=200).free_pages == 800
