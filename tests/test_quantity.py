import math
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as _client_parse_quantity

from extender.core.quantity import (
    INT64_MAX,
    MAX_QUANTITY_CHARS,
    QuantityError,
    parse,
    quote,
    to_millis,
    to_units,
)

parse_quantity: Callable[[str], Decimal] = _client_parse_quantity


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
        ("1E3", 1000, 10**6),
        ("1E", 10**18, 10**21),  # E alone is exa, not an exponent
        ("0", 0, 0),
        ("+5.", 5, 5000),
        (".5", 1, 500),
        ("1e-999999", 1, 1),  # below a nano: Kubernetes rounds up to 1n, at no cost
        ("9223372036854775807", INT64_MAX, INT64_MAX * 1000),
        ("7Ei", 7 << 60, (7 << 60) * 1000),
    ],
)
def test_quantities_parse_with_kubernetes_rounding(raw: str | int | float, units: int, millis: int) -> None:
    assert to_units(raw) == units
    assert to_millis(raw) == millis


@pytest.mark.parametrize(
    "raw",
    [
        "abc",
        "1Zi",
        "",
        "-1Gi",
        "1.5.5",
        ".",
        "1e",
        "1ki",
        "1.5e3Ki",  # the Python client takes it; Kubernetes' grammar does not
        "1_000",  # Decimal() takes underscores; Kubernetes does not
        " 1",
        "NaN",
        "nan",
        "sNaN",
        "Infinity",
        "inf",
        "-Infinity",
        "٣",  # a non-ASCII digit
        True,
        float("nan"),
        float("inf"),
        -1,
    ],
)
def test_odd_quantities_are_rejected_with_the_value_named(raw: str | int | float) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse(raw)


@pytest.mark.parametrize(
    "raw",
    ["1e999999", "1e1000000", "1e400", "1e19", "9223372036854775808", "8Ei", "1e" + "9" * 60, 2**63, 10**400, 1e300],
)
def test_quantities_too_large_for_any_node_are_refused_at_once(raw: str | int | float) -> None:
    started = time.perf_counter()
    with pytest.raises(QuantityError, match="larger than any node"):
        parse(raw)
    assert time.perf_counter() - started < 0.01  # no million-digit integer is ever built


def test_long_quantities_are_refused_before_parsing_and_not_echoed() -> None:
    text = "1" * (4 << 20)
    with pytest.raises(QuantityError) as raised:
        parse(text)
    assert len(str(raised.value)) < 200
    assert f"longer than {MAX_QUANTITY_CHARS} characters" in str(raised.value)
    assert "4194304 characters" in str(raised.value)


def test_quote_escapes_newlines_and_cuts() -> None:
    assert quote("a\nb") == "'a\\nb'"
    assert quote("x" * 100, limit=4) == "'xxxx'... (100 characters)"


def test_parse_is_exact() -> None:
    assert parse("1.5Gi") == Decimal(3 * 512 * 1024 * 1024)
    assert parse("0.1n") == Decimal("1e-9")  # rounded up to a nano, as ParseQuantity does


# Quantities in Kubernetes' grammar, with mantissas short enough that the Python client's
# 28-digit Decimal context computes them exactly.
_quantities = st.builds(
    lambda sign, whole, frac, tail: f"{sign}{whole}{frac}{tail}",
    st.sampled_from(["", "+"]),
    st.integers(min_value=0, max_value=10**9).map(str),
    st.one_of(st.just(""), st.just("."), st.integers(min_value=0, max_value=999_999).map(lambda n: f".{n}")),
    st.one_of(
        st.sampled_from(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]),
        st.builds(lambda e, x: f"{e}{x}", st.sampled_from(["e", "E", "e+", "e-", "E-"]), st.integers(0, 30)),
    ),
)


@given(_quantities)
def test_the_grammar_agrees_with_the_kubernetes_client(text: str) -> None:
    with localcontext() as context:
        context.prec = 100
        expected = parse_quantity(text)
    if expected > INT64_MAX:
        with pytest.raises(QuantityError, match="larger than any node"):
            parse(text)
        return
    value = parse(text)
    # The same value, rounded up to a nano as Kubernetes does (the client does not round).
    assert value == Decimal(math.ceil(expected * 10**9)) / 10**9
    assert to_units(text) == math.ceil(expected)
    assert to_millis(text) == math.ceil(expected * 1000)


def test_the_core_imports_no_kubernetes_client() -> None:
    modules = "extender.core.quantity, extender.core.podrequest, extender.core.decision"
    code = f"import sys, {modules}; print('kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
