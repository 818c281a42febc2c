"""Kubernetes resource quantities, parsed with the official client's rules.

Values are rounded up the way Kubernetes' ``Quantity.Value()`` and
``MilliValue()`` do, so a request of ``1.5`` bytes needs 2 bytes and ``0.1m``
CPU needs 1 millicore.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from kubernetes.utils import parse_quantity

from extender.errors import ExtenderError

RawQuantity = str | int | float


class QuantityError(ExtenderError, ValueError):
    """A quantity string that Kubernetes would not accept."""


@lru_cache(maxsize=8192)
def _parse(text: str) -> Decimal:
    try:
        value: Decimal = parse_quantity(text)  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation, TypeError) as error:
        raise QuantityError(f"invalid quantity {text!r}: {error}") from None
    if value < 0:
        raise QuantityError(f"invalid quantity {text!r}: negative")
    return value


def parse(raw: RawQuantity) -> Decimal:
    """The exact value of a quantity (``"2Mi"``, ``"500m"``, ``4``)."""
    if isinstance(raw, bool):
        raise QuantityError(f"invalid quantity {raw!r}: a boolean")
    if isinstance(raw, float) and not math.isfinite(raw):
        raise QuantityError(f"invalid quantity {raw!r}: not finite")
    return _parse(str(raw)) if not isinstance(raw, str) else _parse(raw)


def ceil_units(value: Decimal) -> int:
    """Whole units, rounded up (bytes for memory and hugepages)."""
    return math.ceil(value)


def ceil_millis(value: Decimal) -> int:
    """Thousandths, rounded up (millicores for CPU)."""
    return math.ceil(value * 1000)


def to_units(raw: RawQuantity) -> int:
    return ceil_units(parse(raw))


def to_millis(raw: RawQuantity) -> int:
    return ceil_millis(parse(raw))
