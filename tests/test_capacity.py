"""The RFC's nodeHasCapacity, case by case. Pools in 2 MiB pages."""

import pytest

from extender.capacity import Fit, NodeAccount, fits, hugepages_for

MiB = 1024 * 1024
PAGE = 2 * MiB


def pool(total: int, used: int = 0, reserved: int = 0, pending_mib: int = 0) -> NodeAccount:
    return NodeAccount(
        page_size=PAGE, total_pages=total, used_pages=used, reserved_pages=reserved, pending_bytes=pending_mib * MiB
    )


@pytest.mark.parametrize(
    ("nbytes", "page", "pages"),
    [(0, PAGE, 0), (1, PAGE, 1), (PAGE, PAGE, 1), (PAGE + 1, PAGE, 2), (512 * MiB, PAGE, 256), (5, 0, 0)],
)
def test_hugepages_for_rounds_up(nbytes: int, page: int, pages: int) -> None:
    assert hugepages_for(nbytes, page) == pages


@pytest.mark.parametrize(
    ("case", "account", "need_mib", "verdict"),
    [
        ("no pool reported: unknown, left to the score", NodeAccount(), 512, Fit.NO_POOL),
        ("page size 0 is no pool", NodeAccount(total_pages=1000), 512, Fit.NO_POOL),
        ("empty pool of 1000 pages holds 256", pool(1000), 512, Fit.FITS),
        ("exactly full after placing: 1000 - 744 = 256 = need", pool(1000, used=500, reserved=244), 512, Fit.FITS),
        ("near-full: 1000 - 745 = 255 < 256", pool(1000, used=500, reserved=245), 512, Fit.INSUFFICIENT),
        ("committed == total", pool(1000, used=1000), 2, Fit.INSUFFICIENT),
        ("over-committed pool", pool(1000, used=900, reserved=200), 2, Fit.INSUFFICIENT),
        ("in flight counts: 1000 - 500 < 256 + 250", pool(1000, used=500, pending_mib=500), 512, Fit.INSUFFICIENT),
        ("in flight that still leaves room: 500 >= 256 + 244", pool(1000, used=500, pending_mib=488), 512, Fit.FITS),
        ("request larger than the whole pool: 1001 > 1000", pool(1000), 2002, Fit.EXCEEDS_POOL),
        ("whole pool exactly, empty", pool(1000), 2000, Fit.FITS),
    ],
)
def test_fits(case: str, account: NodeAccount, need_mib: int, verdict: Fit) -> None:
    assert fits(account, need_mib * MiB) is verdict, case


def test_only_fits_and_no_pool_admit() -> None:
    assert [f for f in Fit if f.admits] == [Fit.NO_POOL, Fit.FITS]


def test_free_pages_never_negative() -> None:
    assert pool(1000, used=900, reserved=200).free_pages == 0
    assert pool(1000, used=100, pending_mib=200).free_pages == 800
