"""Number formatting, as in the reference report."""

from __future__ import annotations

import datetime as dt

import pytest

from infermatrix.core.report.data import (
    DASH,
    fmt_duration,
    fmt_float1,
    fmt_int,
    fmt_ms,
    fmt_seconds,
    fmt_time,
    fmt_tokens,
    fmt_tps,
    status_label,
)


@pytest.mark.parametrize("value, text", [
    (28100, "28.1K"), (224.2, "224.2"), (7950.5, "7,950.5"), (35500.0, "35.5K"), (9999.9, "9,999.9"),
    (9999.96, "10.0K"), (999_960, "1.0M"), (1_234_567, "1.2M"), (0, "0.0"), (None, DASH), (float("nan"), DASH),
])
def test_fmt_tps(value, text):
    assert fmt_tps(value) == text


@pytest.mark.parametrize("value, text", [
    (1806, "1,806 ms"), (4.4, "4.4 ms"), (154, "154 ms"), (16.7, "16.7 ms"), (99.96, "100 ms"),
    (0.42, "0.42 ms"), (0, "0.0 ms"), (8059.4, "8,059 ms"), (None, DASH),
])
def test_fmt_ms(value, text):
    assert fmt_ms(value) == text


def test_other_formats():
    assert fmt_int(238487) == "238,487" and fmt_int(None) == DASH
    assert fmt_float1(15.94) == "15.9"
    assert fmt_seconds(29.94) == "29.9 s"
    assert fmt_tokens(4096) == "4,096 tokens" and fmt_tokens(1) == "1 token"
    assert fmt_duration(42) == "42 s" and fmt_duration(725) == "12 min 5 s" and fmt_duration(7380) == "2 h 03 min"
    assert fmt_time(dt.datetime(2025, 1, 2, 3, 4)) == "2025-01-02 03:04 UTC"
    assert status_label("over_capacity") == "Over capacity" and status_label("client_bound") == "Client bound"
    assert status_label("valid") == "Valid" and status_label("looped") == "Looped" and status_label("error") == "Error"
