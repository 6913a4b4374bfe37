"""The engine's own metrics as a time series: every series its traits name (``MetricNames``), read from its
metrics page, one row per sample line with its labels (docs/telemetry.md).

Rows are ``(t, t_mono, metric, labels, value)``: ``metric`` is the traits' field name (``running``,
``generated_tokens``, …: the same for every engine), ``labels`` the sample's labels as sorted JSON (the vendor's
metric name under ``__name__``). An engine whose counters move only when requests end (``counted_at_request_end``)
gets its gauges only, as the rest of the run reads it. Vendor-neutral: nothing here knows a name.
"""

from __future__ import annotations

import json
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infermatrix.core.engine.prometheus import sample_name
from infermatrix.core.engine.traits import GAUGE_FIELDS, MetricNames, error_text

from infermatrix.core.telemetry.ticker import RowBuffer

__all__ = ["EngineSeries", "wanted_series", "page_rows"]

GAUGES_ONLY = ("running", "waiting", "kv_usage")


def wanted_series(names: MetricNames) -> dict[str, str]:
    """Vendor metric name -> the traits' field name, for the series the run samples."""
    fields = names.names()
    if names.counted_at_request_end:
        fields = {f: n for f, n in fields.items() if f in GAUGES_ONLY}
    return {n: f for f, n in fields.items()}


def page_rows(page: str, names: MetricNames) -> list[tuple[str, str, float]]:
    """``(metric, labels JSON, value)`` for every sample of the wanted series on ``page``."""
    if names.parse is not None:  # not Prometheus text: the engine's own parser, one unlabelled value per field
        g = names.parse(page)
        return [(f, "{}", float(v)) for f in GAUGE_FIELDS if isinstance(v := getattr(g, f), (int, float))]
    wanted = wanted_series(names)
    keep = set(wanted) | {f"{n}_total" for n in wanted}
    lines = [ln for ln in page.splitlines() if ln.startswith(tuple(wanted)) and sample_name(ln) in keep] if wanted else []
    out: list[tuple[str, str, float]] = []
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for s in family.samples:
                base = s.name if s.name in wanted else s.name.removesuffix("_total")
                if base in wanted:
                    out.append((wanted[base], json.dumps({"__name__": base, **s.labels}, sort_keys=True), float(s.value)))
    except (ValueError, TypeError):
        return []
    return out


class EngineSeries(RowBuffer):
    """Reads ``url`` (the engine's metrics page) with its own blocking client, on the telemetry thread."""

    def __init__(self, url: str, headers: dict[str, str], names: MetricNames, timeout_s: float = 5.0):
        self.url, self.names = url, names
        self.client = httpx.Client(headers=headers, timeout=timeout_s)
        super().__init__()  # rows: (t, t_mono, metric, labels, value)

    def read(self) -> None:
        t0 = time.monotonic()
        try:
            r = self.client.get(self.url)
            r.raise_for_status()
            page = r.text
        except httpx.HTTPError as exc:
            self.failures += 1
            self.last_error = error_text(exc)
            return
        t_mono = (t0 + time.monotonic()) / 2  # the page was rendered somewhere in between
        t = time.time() - (time.monotonic() - t_mono)
        rows = [(t, t_mono, metric, labels, value) for metric, labels, value in page_rows(page, self.names)]
        self.keep(rows)

    def close(self) -> None:
        self.client.close()
