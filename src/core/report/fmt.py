"""Number formatting shared by every report, matching the reference report's style."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from typing_extensions import TypeIs

__all__ = [
    "DASH",
    "STATUS_LABELS",
    "fmt_tps",
    "fmt_span",
    "fmt_ms",
    "fmt_tps_pm",
    "fmt_ms_pm",
    "PM",
    "fmt_ms_plain",
    "fmt_int",
    "fmt_float1",
    "fmt_float2",
    "fmt_pct",
    "fmt_share",
    "fmt_usd",
    "fmt_ratio",
    "fmt_seconds",
    "fmt_tokens",
    "fmt_duration",
    "fmt_time",
    "status_label",
]

DASH = "—"  # what a missing or discarded number shows as

STATUS_LABELS = {
    "valid": "Valid",
    "looped": "Looped",
    "over_capacity": "Over capacity",
    "error": "Error",
    "client_bound": "Client bound",
    "interrupted": "Interrupted",
    "admission_limited": "Admission limited",
}


def _missing(v: Any) -> TypeIs[None]:
    # TypeIs: past this check a value is known to be a number (NaN counts as missing too).
    return v is None or (isinstance(v, float) and math.isnan(v))


def _tps_scale(v: float) -> tuple[float, int, str]:
    """How fmt_tps prints ``v``: (divisor, decimals, suffix)."""
    if abs(round(v, 1)) < 10_000:
        return 1.0, 1, ""
    if abs(round(v / 1e3, 1)) < 1000:
        return 1e3, 1, "K"
    return 1e6, 1, "M"


def fmt_tps(v: float | None) -> str:
    """Tokens per second: ``28100 -> "28.1K"``, ``7950.5 -> "7,950.5"``, ``224.2 -> "224.2"``.

    Five digits and up switch to K (and M) so prefill rates stay short; decode rates below 10,000
    keep their decimal, as in the reference report.
    """
    if _missing(v):
        return DASH
    div, decimals, suffix = _tps_scale(float(v))
    return f"{float(v) / div:,.{decimals}f}{suffix}"


def _ms_decimals(v: float) -> int:
    """How many decimals fmt_ms prints ``v`` with."""
    if abs(round(v, 1)) >= 100:
        return 0
    return 2 if abs(v) < 1 and v != 0 else 1


def fmt_ms(v: float | None) -> str:
    """Milliseconds: ``1806 -> "1,806 ms"``, ``4.4 -> "4.4 ms"``, ``0.42 -> "0.42 ms"``."""
    if _missing(v):
        return DASH
    return f"{float(v):,.{_ms_decimals(float(v))}f} ms"


PM = "±"  # a number's 95 % interval, shown where it is wider than the number's printed precision (docs/reports.md)
Bounds = tuple[float | None, float | None]  # an interval's (lo, hi); None: that side has no bound from the data


def _pm(v: float, bounds: Bounds | None, div: float, decimals: int, suffix: str) -> str:
    """`` ±h`` (h the larger side of the interval, printed like the number), `` ±?`` for an interval open on a side,
    or nothing: no interval, or one whose half-width rounds to less than one unit of the number's last digit."""
    if bounds is None:
        return ""
    lo, hi = bounds
    if lo is None or hi is None:
        return f" {PM}?"
    half = max(hi - v, v - lo) / div
    if round(half, decimals) < 10.0**-decimals:
        return ""
    return f" {PM}{half:,.{decimals}f}{suffix}"


def fmt_tps_pm(v: float | None, bounds: Bounds | None) -> str:
    """fmt_tps with the interval's half-width where it shows: ``"7,950.5 ±12.3"``, ``"28.1K ±0.4K"``."""
    if _missing(v):
        return DASH
    return fmt_tps(v) + _pm(float(v), bounds, *_tps_scale(float(v)))


def fmt_ms_pm(v: float | None, bounds: Bounds | None) -> str:
    """fmt_ms with the interval's half-width where it shows: ``"1,806 ±25 ms"``, ``"4.4 ±0.3 ms"``."""
    if _missing(v):
        return DASH
    v = float(v)
    return f"{v:,.{_ms_decimals(v)}f}{_pm(v, bounds, 1.0, _ms_decimals(v), '')} ms"


def fmt_ms_plain(v: float | None) -> str:
    """Milliseconds in a table whose caption says "in ms" (open-loop, trace, workload): ``1806 -> "1,806"``,
    ``6.25 -> "6.2"`` (one decimal below 100, none from 100)."""
    if _missing(v):
        return DASH
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def fmt_int(v: int | float | None) -> str:
    """``238487 -> "238,487"``."""
    if _missing(v):
        return DASH
    return f"{int(round(v)):,}"


def fmt_float1(v: float | None) -> str:
    """One decimal: average active requests ``15.9``."""
    if _missing(v):
        return DASH
    return f"{float(v):,.1f}"


def fmt_float2(v: float | None) -> str:
    """Two decimals: an achieved rate ``3.83``, good requests per second ``0.27``."""
    if _missing(v):
        return DASH
    return f"{float(v):.2f}"


def fmt_pct(v: float | None) -> str:
    """A workload's share of tokens: ``0.24 -> "24.0%"`` (the workload section's style; SLO shares use fmt_share)."""
    if _missing(v):
        return DASH
    return f"{v:.1%}"


def fmt_share(v: float | None) -> str:
    """An SLO or engine share: ``0.9731 -> "97.3 %"``."""
    if _missing(v):
        return DASH
    return f"{100.0 * v:.1f} %"


def fmt_signed_share(v: float | None) -> str:
    """One number against another as a signed share: the engine's tok/s vs the client's ``0.0031 -> "+0.3 %"``."""
    if _missing(v):
        return DASH
    return f"{100.0 * v:+.1f} %"


def fmt_watts(v: float | None) -> str:
    """Average power: ``224.96 -> "225 W"``, ``61.25 -> "61.2 W"``."""
    if _missing(v):
        return DASH
    return f"{v:,.0f} W" if v >= 100 else f"{v:.1f} W"


def fmt_yes(v: bool | None, why: str | None = None) -> str:
    """A flag: ``"yes"`` (with its why, ``"yes (sw_power_cap)"``), ``"no"``, or a dash where nothing was read."""
    if v is None:
        return DASH
    return ("yes" + (f" ({why})" if why else "")) if v else "no"


def fmt_usd(v: float | None) -> str:
    """Dollars per million tokens: ``0.4123 -> "$0.412"``, ``12.5 -> "$12.50"``."""
    if _missing(v):
        return DASH
    return f"${v:.3f}" if v < 1 else f"${v:,.2f}"


def fmt_p(v: float | None) -> str:
    """A test's p-value, three significant digits: ``0.01234 -> "0.0123"``, ``1.0 -> "1"``."""
    if _missing(v):
        return DASH
    return f"{v:.3g}"


def fmt_ratio(r: float | None) -> str:
    """A comparison's other run / baseline: ``1.304 -> "×1.30"``."""
    if _missing(r):
        return DASH
    return f"×{r:.2f}"


def fmt_seconds(v: float | None) -> str:
    """``29.9 -> "29.9 s"``."""
    if _missing(v):
        return DASH
    return f"{float(v):,.1f} s"


def fmt_span(v: float | None) -> str:
    """A short span in seconds (a burst, its tail): ``0.0312 -> "0.031 s"``, ``1.93 -> "1.93 s"``, ``41.2 -> "41.2 s"``."""
    if _missing(v):
        return DASH
    v = float(v)
    return f"{v:.3f} s" if v < 1 else f"{v:.2f} s" if v < 10 else f"{v:,.1f} s"


def fmt_tokens(v: int | None) -> str:
    """``4096 -> "4,096 tokens"``."""
    if _missing(v):
        return DASH
    return f"{fmt_int(v)} token{'s' if int(v) != 1 else ''}"


def fmt_duration(seconds: float | None) -> str:
    """A run's length: ``"42 s"``, ``"12 min 5 s"``, ``"2 h 03 min"``."""
    if _missing(seconds):
        return DASH
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def fmt_time(t: dt.datetime | None) -> str:
    """Stored times are naive UTC; say so."""
    if t is None:
        return DASH
    return f"{t:%Y-%m-%d %H:%M} UTC"


def status_label(status: str | None) -> str:
    """``"over_capacity" -> "Over capacity"``."""
    if not status:
        return DASH
    return STATUS_LABELS.get(status, status.replace("_", " ").capitalize())
