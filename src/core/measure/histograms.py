"""HDR histograms of latencies, kept in integer microseconds.

One unit and one range for every histogram, so any two can be merged and any stored one decoded
without metadata: 1 µs … 1 hour, 3 significant digits (values read back within 0.1 %).
Encoded form is HdrHistogram's standard compressed base64 (``HISTF…``), readable by other HDR tools.
"""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

__all__ = [
    "LOWEST_US",
    "HIGHEST_US",
    "SIGNIFICANT_DIGITS",
    "new_histogram",
    "record_seconds",
    "encode",
    "decode",
    "histogram_of",
    "percentile",
    "value_at",
    "values_at",
    "merge",
]

LOWEST_US = 1
HIGHEST_US = 3600 * 1_000_000
SIGNIFICANT_DIGITS = 3


def new_histogram() -> HdrHistogram:
    """An empty histogram over 1 µs … 1 hour, 3 significant digits."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_seconds(h: HdrHistogram, value_s: float) -> None:
    """Record one latency given in seconds.

    Values are clamped into the range rather than dropped: a sub-microsecond gap (two tokens in one
    read) still counts as the fastest bucket, and HdrHistogram silently ignores out-of-range values,
    which would make counts disagree with the requests table.
    """
    us = int(round(value_s * 1_000_000))
    h.record_value(min(max(us, LOWEST_US), HIGHEST_US))


def encode(h: HdrHistogram) -> bytes:
    """Compressed base64 bytes (ASCII), safe to store as text."""
    return h.encode()


def decode(b: bytes | str) -> HdrHistogram:
    """The histogram from :func:`encode`'s output (bytes or the same text as ``str``)."""
    if isinstance(b, str):
        b = b.encode("ascii")
    return HdrHistogram.decode(b)


def histogram_of(values_s: Iterable[float]) -> bytes:
    """Encode latencies given in seconds; ``None`` entries are skipped."""
    h = new_histogram()
    for v in values_s:
        if v is not None:
            record_seconds(h, v)
    return encode(h)


def percentile(encoded: bytes | str, p: float) -> float:
    """The value at percentile ``p`` (0–100), in milliseconds; ``nan`` for an empty histogram."""
    h = decode(encoded)
    if h.get_total_count() == 0:
        return float("nan")
    return value_at(h, p) / 1000.0


def value_at(h: HdrHistogram, p: float) -> int:
    """Microseconds at percentile ``p``: the value of rank max(1, round(p/100 x count)) in sorted
    order, HDR-rounded up (within 0.1 %); 0 and 100 are the recorded min and max."""
    if p <= 0:
        return h.get_min_value()
    if p >= 100:
        return h.get_max_value()
    return h.get_value_at_percentile(p)


def values_at(h: HdrHistogram, ps: Iterable[float]) -> dict[float, int]:
    """:func:`value_at` for many percentiles in one pass over the buckets (hdrh's per-call
    ``get_value_at_percentile`` rescans from the start: ~3 ms each, too slow for a 100-point grid)."""
    ps = list(ps)
    inner = [p for p in ps if 0 < p < 100]
    out = {p: int(v) for p, v in h.get_percentile_to_value_dict(inner).items()} if inner else {}
    for p in ps:
        if p <= 0 or p >= 100:
            out[p] = value_at(h, p)
    return out


def merge(encoded: Iterable[bytes | str]) -> bytes:
    """Several hosts' histograms as one, exactly (HDR add: every bucket's counts summed; never percentiles averaged)."""
    h = new_histogram()
    for e in encoded:
        h.add(decode(e))
    return encode(h)
