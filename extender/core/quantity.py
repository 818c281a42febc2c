"""Kubernetes resource quantities, parsed with Kubernetes' own grammar and bounds.

The grammar is ``resource.Quantity``'s (k8s.io/apimachinery ``quantity.go``)::

    <quantity>     ::= <signedNumber><suffix>
    <signedNumber> ::= <number> | +<number> | -<number>
    <number>       ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>       ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>     ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>    ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedInteger> | "E" <signedInteger>

Values are exact, rounded up to a nano as ``ParseQuantity`` does ("if you want
some resources, you should get some resources"), then rounded up the way
``Quantity.Value()`` and ``MilliValue()`` do: a request of ``1.5`` bytes needs
2 bytes and ``0.1m`` CPU needs 1 millicore.

Every input is bounded before any arithmetic: at most ``MAX_QUANTITY_CHARS``
characters, and a magnitude checked from the digit count and the exponent
alone, so ``"1e999999"`` costs what ``"1e3"`` costs instead of a million-digit
integer (which froze the event loop for close to a minute). A value above
2^63-1 (the largest ``Quantity.Value()``) is too large for any node and is an
error, as are ``NaN``, ``Infinity`` and everything else outside the grammar.
This module imports no Kubernetes client (the pure core stays light); a test
holds it equal to ``kubernetes.utils.parse_quantity`` on valid inputs.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from functools import lru_cache

from extender.core.errors import ExtenderError

RawQuantity = str | int | float

MAX_QUANTITY_CHARS = 64  # far above any real quantity ("9223372036854775807", "1.5Gi"); a cache key bound too
INT64_MAX = (1 << 63) - 1  # the largest value Quantity.Value() gives: nothing on a node is larger
_NANO = 10**9

_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?",
    re.ASCII,
)
# Each suffix as (base, power).
_SUFFIXES = {
    "Ki": (1024, 1),
    "Mi": (1024, 2),
    "Gi": (1024, 3),
    "Ti": (1024, 4),
    "Pi": (1024, 5),
    "Ei": (1024, 6),
    "n": (10, -9),
    "u": (10, -6),
    "m": (10, -3),
    "k": (10, 3),
    "M": (10, 6),
    "G": (10, 9),
    "T": (10, 12),
    "P": (10, 15),
    "E": (10, 18),
}


class QuantityError(ExtenderError, ValueError):
    """A quantity string that Kubernetes would not accept, or too large for any node."""


class QuantityTooLarge(QuantityError):
    """A well-formed quantity above 2^63-1: more than any node holds."""


def quote(value: object, limit: int = 40) -> str:
    """``repr`` of a value from a request, cut to ``limit`` characters: error messages
    and log lines never carry unbounded input, and a newline in it stays ``\\n``."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _invalid(text: str, why: str) -> QuantityError:
    return QuantityError(f"invalid quantity {quote(text)}: {why}")


def _too_large(text: str) -> QuantityError:
    return QuantityTooLarge(f"invalid quantity {quote(text)}: larger than any node can hold (over 2^63-1)")


@lru_cache(maxsize=8192)  # keys are at most MAX_QUANTITY_CHARS long: at most ~1 MiB kept
def _parse(text: str) -> Decimal:
    mantissa, exponent, factor = _terms(text)
    if mantissa == 0:
        return Decimal(0)
    return _in_nanos(text, mantissa, exponent, factor)


def _terms(text: str) -> tuple[int, int, int]:
    """The quantity as ``mantissa * 10**exponent * factor`` (``factor``: a binary suffix's power
    of 1024, else 1), read from the grammar without any arithmetic on the exponent's size."""
    match = _GRAMMAR.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise _invalid(text, "not a Kubernetes quantity (such as 2Mi, 500m, 1.5Gi, 1e3)")
    if match["sign"] == "-":
        raise _invalid(text, "negative")
    int_digits, frac_digits = match["int"] or "", match["frac"] or ""
    mantissa = int(int_digits + frac_digits)  # at most MAX_QUANTITY_CHARS digits
    exponent = -len(frac_digits)
    if match["exp"]:
        return mantissa, exponent + int(match["exp"][1:]), 1  # at most MAX_QUANTITY_CHARS digits: cheap
    if match["suffix"]:
        base, power = _SUFFIXES[match["suffix"]]
        return (mantissa, exponent + power, 1) if base == 10 else (mantissa, exponent, base**power)
    return mantissa, exponent, 1


def _in_nanos(text: str, mantissa: int, exponent: int, factor: int) -> Decimal:
    """``mantissa * 10**exponent * factor`` (``mantissa`` not 0) exactly, in whole nanos rounded up,
    or an error when it is over 2^63-1."""
    # The magnitude from the digit count and the exponent alone, before any arithmetic:
    # value >= 10^(digits - 1 + exponent), so a value of 10^19 or more is over 2^63-1.
    digits = len(str(mantissa))
    if digits - 1 + exponent >= 19:
        raise _too_large(text)
    if digits + exponent < -40:
        # Below 10^-40 * 1024^6 < 10^-9: Kubernetes rounds any such value up to one nano.
        return Decimal("1e-9")
    # Exact, in whole nanos rounded up; every factor is now bounded.
    scaled = mantissa * factor
    shift = exponent + 9
    nanos = scaled * 10**shift if shift >= 0 else -(-scaled // 10**-shift)
    if nanos > INT64_MAX * _NANO:
        raise _too_large(text)
    return Decimal(f"{nanos}e-9")


def parse(raw: RawQuantity) -> Decimal:
    """The exact value of a quantity (``"2Mi"``, ``"500m"``, ``4``), at most 2^63-1."""
    if isinstance(raw, bool):
        raise _invalid(str(raw), "a boolean")
    if isinstance(raw, int):
        if raw < 0:
            raise _invalid(str(raw), "negative")
        if raw > INT64_MAX:
            raise QuantityError("invalid quantity: an integer larger than any node can hold (over 2^63-1)")
        return Decimal(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise _invalid(str(raw), "not finite")
        raw = repr(raw)
    if not isinstance(raw, str):
        raise QuantityError(f"invalid quantity of type {type(raw).__name__}")
    if len(raw) > MAX_QUANTITY_CHARS:
        raise _invalid(raw, f"longer than {MAX_QUANTITY_CHARS} characters")
    return _parse(raw)


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
