"""Go duration strings: parsing as time.ParseDuration does, formatting as Duration.String()."""

from __future__ import annotations

import pytest

from custom_scheduler.config.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("15s", 15.0, id="seconds"),
        pytest.param("1m30s", 90.0, id="minutes-and-seconds"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1h", 3600.0, id="hours"),
        pytest.param("1.5s", 1.5, id="fraction"),
        pytest.param(".5m", 30.0, id="leading-dot"),
        pytest.param("0", 0.0, id="bare-zero"),
        pytest.param("2h45m", 9900.0, id="hours-minutes"),
        pytest.param("100us", 0.0001, id="micro-ascii"),
        pytest.param("100µs", 0.0001, id="micro-sign"),
        pytest.param("1000000ns", 0.001, id="nanoseconds"),
        pytest.param("-2s", -2.0, id="negative"),
        pytest.param("+2s", 2.0, id="plus"),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "15 s", "15sec", "1d", "1m 30s", "abc", "--1s", "1.2.3s"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(15.0, "15s", id="seconds"),
        pytest.param(90.0, "1m30s", id="minutes"),
        pytest.param(3600.0, "1h0m0s", id="hours-like-go"),
        pytest.param(0.5, "500ms", id="sub-second"),
        pytest.param(1.5, "1.5s", id="fraction"),
        pytest.param(0.0015, "1.5ms", id="fractional-ms"),
        pytest.param(0.0, "0s", id="zero"),
        pytest.param(-2.0, "-2s", id="negative"),
        pytest.param(1e-9, "1ns", id="nanosecond"),
    ],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [15.0, 10.0, 2.0, 0.5, 90.0, 1.25, 3661.5, 0.000123])
def test_round_trip(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)
