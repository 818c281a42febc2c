from decimal import Decimal

import pytest

from extender.quantity import QuantityError, parse, to_millis, to_units


@pytest.mark.parametrize(
    ("raw", "units", "millis"),
    [
        ("2Mi", 2 * 1024 * 1024, 2 * 1024 * 1024 * 1000),
        ("1Gi", 1 << 30, (1 << 30) * 1000),
        ("1G", 10**9, 10**12),
        ("500m", 1, 500),  # 0.5 rounds up to 1 whole unit, as Quantity.Value() does
        ("0.1m", 1, 1),  # a fraction of a millicore rounds up to 1m
        (4, 4, 4000),
        (1.5, 2, 1500),
        ("1e3", 1000, 10**6),
        ("0", 0, 0),
    ],
)
def test_quantities_parse_with_kubernetes_rounding(raw: str | int | float, units: int, millis: int) -> None:
    assert to_units(raw) == units
    assert to_millis(raw) == millis


@pytest.mark.parametrize("raw", ["abc", "1Zi", "", "-1Gi", "1.5.5", True, float("nan"), float("inf")])
def test_odd_quantities_are_rejected_with_the_value_named(raw: str | int | float) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse(raw)


def test_parse_is_exact() -> None:
    assert parse("1.5Gi") == Decimal(3 * 512 * 1024 * 1024)
