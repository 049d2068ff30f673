"""Resource quantities: every form Kubernetes accepts, parsed exactly and rounded up."""

from __future__ import annotations

from decimal import Decimal

import hypothesis.strategies as st
import pytest
from hypothesis import given

from custom_scheduler.api import quantity


@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [
        pytest.param("100m", 100, 1, id="milli rounds up to 1 unit"),
        pytest.param("1", 1000, 1, id="plain integer"),
        pytest.param("1.5", 1500, 2, id="decimal"),
        pytest.param("0.1", 100, 1, id="fraction"),
        pytest.param(".5", 500, 1, id="leading dot"),
        pytest.param("1e3", 1_000_000, 1000, id="exponent"),
        pytest.param("1E-3", 1, 1, id="negative exponent"),
        pytest.param("2k", 2_000_000, 2000, id="decimal SI"),
        pytest.param("1Ki", 1_024_000, 1024, id="binary SI"),
        pytest.param("1.5Gi", 1610612736000, 1610612736, id="fractional binary"),
        pytest.param("128974848", 128974848000, 128974848, id="bytes"),
        pytest.param("129e6", 129_000_000_000, 129_000_000, id="exponent bytes"),
        pytest.param("123Mi", 128974848000, 128974848, id="mebibytes"),
        pytest.param("1n", 1, 1, id="nano rounds up"),
        pytest.param("+2", 2000, 2, id="explicit sign"),
        pytest.param("0", 0, 0, id="zero"),
    ],
)
def test_parse_known_forms(text: str, milli: int, units: int) -> None:
    assert quantity.to_milli(text) == milli
    assert quantity.to_int(text) == units


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "1KiB", "1 Gi", "--1", "1e", "Mi", "1ki"])
def test_invalid_forms_are_rejected(bad: str) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse(bad)


_SUFFIX: dict[str, int | Decimal] = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "m": Decimal("0.001"),
}


@given(st.integers(0, 10**6), st.sampled_from(sorted(_SUFFIX)))
def test_integer_with_suffix_is_exact(n: int, suffix: str) -> None:
    assert quantity.parse(f"{n}{suffix}") == Decimal(n) * Decimal(_SUFFIX[suffix])


@given(st.integers(0, 10**9))
def test_milli_cpu_round_trips(milli: int) -> None:
    assert quantity.to_milli(quantity.format_milli_cpu(milli)) == milli


@given(st.integers(0, 2**50))
def test_bytes_round_trip(n: int) -> None:
    assert quantity.to_int(quantity.format_bytes(n)) == n


@given(st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False))
def test_milli_is_ceiling_of_exact_value(d: Decimal) -> None:
    assert quantity.to_milli(str(d)) == int((d * 1000).to_integral_value(rounding="ROUND_CEILING"))
