"""Turning the runner's dataclasses into table rows (pure Python, no database)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from typing import Any

from infermatrix.core.measure import histograms as hdr
from infermatrix.core.types import CellResult, PrefillResult, RequestRecord

__all__ = [
    "HOST_COLUMNS", "host_rows",
    "PERCENTILE_GRID",
    "SUMMARY_PERCENTILES",
    "EVIDENCE_TEXT_BYTES",
    "to_timestamp",
    "to_json",
    "prefill_row",
    "prefill_sample_rows",
    "prefill_interval_rows",
    "PREFILL_INTERVAL_COLUMNS",
    "cell_row",
    "request_rows",
    "histogram_rows",
]

# The percentiles decoded into histogram_percentiles at save time. latency_at() answers with the
# nearest grid point >= p, so the grid is fine where latency tails matter: every 1 %, then 99.x.
# Built from decimal literals so 99.9 here is the same double as the SQL literal 99.9.
SUMMARY_PERCENTILES = (50.0, 90.0, 99.0, 99.9, 100.0)
PERCENTILE_GRID = tuple(
    [0.0]
    + [float(p) for p in range(1, 100)]
    + [float(f"99.{d}") for d in range(1, 10)]
    + [99.99, 100.0]
)

# Looped requests keep their output as evidence; the tail is kept because loops show at the end.
EVIDENCE_TEXT_BYTES = 4096

# ttft, tbt (per-request mean gap), e2e (request latency), itl (every gap between chunks), ttfo (time to the first
# answer token, the TTFT population's requests that got one: docs/metrics.md).
HISTOGRAM_METRICS = ("ttft", "tbt", "e2e", "itl", "ttfo")


def to_timestamp(value: Any) -> dt.datetime | None:
    """Epoch seconds or a datetime -> naive UTC datetime (what TIMESTAMP columns hold)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(float(value), dt.UTC).replace(tzinfo=None)
    if isinstance(value, str):
        return to_timestamp(dt.datetime.fromisoformat(value))
    raise TypeError(f"not a time: {value!r}")


def to_json(value: Any) -> str | None:
    """Dicts, lists, dataclasses and pydantic models -> JSON text; ``None`` stays NULL."""
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, default=str, sort_keys=True)


def _num(x: float | None) -> float | None:
    # NaN would sort and compare oddly in SQL; a missing number is NULL.
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def prefill_row(run_id: str, r: PrefillResult) -> list[Any]:
    kept = len(r.median_probes()) if r.samples else None  # the probes ttft_ms is the median of
    return [run_id, r.context_tokens, r.prompt_tokens, _num(r.ttft_ms), _num(r.prompt_tps), r.status, r.reason, kept,
            to_json(r.engine_counters)]


def prefill_sample_rows(run_id: str, r: PrefillResult) -> list[list[Any]]:
    return [
        [run_id, r.context_tokens, s.sample_no, s.throwaway, s.request_id, s.prompt_tokens, _num(s.ttft_ms),
         _num(s.sent), _num(s.first_token), s.outcome]
        for s in r.samples
    ]


# prefill_interval_rows (prefill_intervals.sql): one row per number of a prefill point with its interval (r.intervals).
PREFILL_INTERVAL_COLUMNS = ("run_id", "context_tokens", "metric", "value", "lo", "hi", "method", "n")


def prefill_interval_rows(run_id: str, r: PrefillResult) -> list[list[Any]]:
    return [[run_id, r.context_tokens, metric, iv.value, iv.lo, iv.hi, iv.method, iv.n]
            for metric, iv in sorted((r.intervals or {}).items())]  # fmt: skip


def cell_row(run_id: str, c: CellResult) -> list[Any]:
    return [
        run_id, c.context_tokens, c.concurrency, c.status, c.reason,
        _num(c.total_tps), _num(c.per_request_tps), _num(c.ttft_ms), _num(c.tbt_ms), _num(c.avg_active),
        c.completed, c.output_tokens, _num(c.measured_s), _num(c.window_start), _num(c.window_end),
        c.token_source, c.prompt_tokens, to_timestamp(c.started_at), to_timestamp(c.finished_at),
        to_json(c.flags or {}),
        _num(c.ttft_burst_ms), c.ttft_burst_n, _num(c.ttft_restart_ms), c.ttft_restart_n,
        _num((c.flags.get("admission") or {}).get("ran_at_most")) if c.flags else None,
    ]


def _evidence_text(text: str) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= EVIDENCE_TEXT_BYTES:
        return text
    # Cutting bytes may split a character at the start; drop the fragment rather than fail.
    return raw[-EVIDENCE_TEXT_BYTES:].decode("utf-8", errors="ignore")


def request_rows(run_id: str, c: CellResult) -> list[list[Any]]:
    rows = []
    for i, r in enumerate(c.requests):
        rows.append(_request_row(run_id, c, i, r))
    return rows


def _request_row(run_id: str, c: CellResult, i: int, r: RequestRecord) -> list[Any]:
    looped = r.loop is not None
    evidence = None
    if r.loop is not None:
        evidence = dataclasses.asdict(r.loop)
        evidence["text_bytes"] = len(r.text.encode("utf-8"))  # says whether `text` is the whole output
    ttft = r.ttft_s
    return [
        run_id, c.context_tokens, c.concurrency, i, r.stream_index, r.seq,
        r.sent, r.first_token, r.ended, None if ttft is None else ttft * 1000.0,
        r.output_tokens, len(r.events), r.prompt_tokens, r.finish_reason, r.outcome, r.error,
        r.token_source, looped, to_json(evidence), _evidence_text(r.text) if looped else None,
        None if r.ttfo_s is None else r.ttfo_s * 1000.0, r.reasoning, r.reasoning_tokens,
    ]


def histogram_rows(run_id: str, c: CellResult) -> tuple[list[list[Any]], list[list[Any]]]:
    """Rows for ``histograms`` and ``histogram_percentiles``; decodes each histogram once."""
    hist_rows, pct_rows = [], []
    for metric, encoded in sorted(c.histograms.items()):
        if metric not in HISTOGRAM_METRICS:
            raise ValueError(f"unknown histogram metric {metric!r} (expected one of {', '.join(HISTOGRAM_METRICS)})")
        text = encoded.decode("ascii") if isinstance(encoded, (bytes, bytearray)) else str(encoded)
        try:
            h = hdr.decode(text)
        except Exception as exc:  # hdrh raises assorted errors for corrupt input
            raise ValueError(f"histogram {metric!r} is not a valid HDR encoding: {exc}") from None
        count = h.get_total_count()
        hist_rows.append([run_id, c.context_tokens, c.concurrency, metric, "us", count, text])
        if count:
            values = hdr.values_at(h, PERCENTILE_GRID)
            for p in PERCENTILE_GRID:
                pct_rows.append([run_id, c.context_tokens, c.concurrency, metric, p, values[p] / 1000.0])
    return hist_rows, pct_rows


# cell_host_stats (hosts.sql): one row per client host of a cell run on Ray actors, from its flags["hosts"].
HOST_COLUMNS = (
    "run_id", "context_tokens", "concurrency", "host", "actor", "node_id", "hostname", "streams", "requests", "completed",
    "output_tokens", "total_tps", "lag_p99_ms", "lag_max_ms", "cpu_pct", "offset_ms", "uncertainty_ms", "drift_ppm",
    "drift_uncertainty_ppm", "rtt_min_ms", "clock_estimates",
)


def host_rows(run_id: str, c: CellResult) -> list[list[Any]]:
    return [[run_id, c.context_tokens, c.concurrency, *(h.get(col) for col in HOST_COLUMNS[3:])] for h in (c.flags or {}).get("hosts") or []]


# cell_interval_rows (intervals.sql): one row per number of a cell with its interval (c.intervals, from measure).
INTERVAL_COLUMNS = ("run_id", "context_tokens", "concurrency", "metric", "value", "lo", "hi", "method", "n")


def interval_rows(run_id: str, c: CellResult) -> list[list[Any]]:
    return [[run_id, c.context_tokens, c.concurrency, metric, iv.value, iv.lo, iv.hi, iv.method, iv.n]
            for metric, iv in sorted((c.intervals or {}).items())]  # fmt: skip
