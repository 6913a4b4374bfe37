"""The charts of a run's HTML report, built from its loaded view rows (ReportData).

Throughput against concurrency (log-2 x axis, one line per context), prefill against context,
the decode matrix as a heatmap, and TTFT / TBT percentile bands from latency_percentiles.
"""

from __future__ import annotations

from infermatrix.core.contexts import format_context, parse_context
from infermatrix.core.report.data import ReportData, fmt_ms, fmt_tps, status_label
from infermatrix.core.report.model import Chart
from infermatrix.core.report.svg_heatmap import HeatCell, heatmap, sequential_colour
from infermatrix.core.report.svg_plot import Series, compact_number, line_chart

__all__ = ["Chart", "report_charts", "CHART_IDS"]

CHART_IDS = ("total-tps", "per-request-tps", "prefill-tps", "prefill-ttft", "decode-heatmap", "ttft-percentiles", "tbt-percentiles")
_SHORT_STATUS = {"over_capacity": "Over cap.", "client_bound": "Client bd.", "admission_limited": "Adm. lim."}


def _context_axis(v: float) -> str:
    return format_context(int(round(v)))


def _n_axis(v: float) -> str:
    return str(int(round(v)))


def _by_context(d: ReportData, column: str, unit) -> list[Series]:
    out = []
    for ctx in d.contexts:
        pts = []
        for n in d.concurrencies:
            r = d.cell(ctx, n)
            if r is not None and r["status"] == "valid" and r[column] is not None:
                pts.append((float(n), float(r[column]), f"{format_context(ctx)} × {n}: {unit(r[column])}"))
        out.append(Series(f"{format_context(ctx)} context", pts))
    return out


def _decode_charts(d: ReportData) -> list[Chart]:
    total = line_chart(
        _by_context(d, "total_tps", lambda v: f"{fmt_tps(v)} tok/s"), title="Total tok/s vs requests at once",
        x_label="requests at once (log 2)", y_label="total tok/s", x_format=_n_axis, chart_id="total-tps",
    )
    per_req = line_chart(
        _by_context(d, "per_request_tps", lambda v: f"{fmt_tps(v)} tok/s per request"),
        title="Per-request tok/s vs requests at once", x_label="requests at once (log 2)", y_label="tok/s per request",
        x_format=_n_axis, chart_id="per-request-tps",
    )
    cells, values = [], []
    for r in d.decode:
        row, col = format_context(r["context_tokens"]), str(r["concurrency"])
        if r["status"] == "valid" and r["total_tps"] is not None:
            values.append(r["total_tps"])
            tip = f"{row} × {col}: {fmt_tps(r['total_tps'])} tok/s, TTFT {fmt_ms(r['ttft_ms'])}"
            cells.append(HeatCell(row, col, r["total_tps"], fmt_tps(r["total_tps"]), tip))
        else:
            label = status_label(r["status"])
            cells.append(HeatCell(row, col, None, _SHORT_STATUS.get(r["status"], label), f"{row} × {col}: {label}", r["status"]))
    lo, hi = (min(values), max(values)) if values else (1.0, 1.0)
    heat = heatmap(
        cells, [format_context(c) for c in d.contexts], [str(n) for n in d.concurrencies],
        title="Decode matrix: total tok/s", colour=sequential_colour(lo, hi),
        legend=(f"{fmt_tps(lo)} tok/s", f"{fmt_tps(hi)} tok/s") if values else None, chart_id="decode-heatmap",
    )
    return [
        Chart("total-tps", "Total tok/s vs requests at once", "Output tokens per second across all streams; one line per context.", total),
        Chart("per-request-tps", "Per-request tok/s vs requests at once", "Median decode speed a single stream sees.", per_req),
        Chart("decode-heatmap", "Decode matrix", "Colour: total tok/s (log scale); grey cells were not measured or were discarded.", heat),
    ]


def _prefill_charts(d: ReportData) -> list[Chart]:
    valid = [p for p in d.prefill if p["status"] == "valid"]
    tps = Series("prompt tok/s", [(float(p["context_tokens"]), float(p["prompt_tps"]),
                                   f"{p['context_label']}: {fmt_tps(p['prompt_tps'])} prompt tok/s") for p in valid if p["prompt_tps"] is not None])
    ttft = Series("TTFT", [(float(p["context_tokens"]), float(p["ttft_ms"]),
                            f"{p['context_label']}: {fmt_ms(p['ttft_ms'])} TTFT") for p in valid if p["ttft_ms"] is not None])
    return [
        Chart("prefill-tps", "Prefill: prompt tok/s vs context", "One cold request per context (never-seen prefix, 1 output token).",
              line_chart([tps], title="Prefill: prompt tok/s vs context", x_label="context (log 2)", y_label="prompt tok/s",
                         x_format=_context_axis, chart_id="prefill-tps")),
        Chart("prefill-ttft", "Prefill: TTFT vs context", "Time to first token of the cold request, prefill included.",
              line_chart([ttft], title="Prefill: TTFT vs context", x_label="context (log 2)", y_label="TTFT (ms)",
                         x_format=_context_axis, chart_id="prefill-ttft")),
    ]


def _percentile_chart(d: ReportData, metric: str, name: str) -> Chart | None:
    rows = [r for r in d.latency if r["metric"] == metric and r["p50"] is not None]
    if not rows:
        return None
    series = []
    for label in dict.fromkeys(r["context_label"] for r in rows):
        mine = sorted((r for r in rows if r["context_label"] == label), key=lambda r: r["concurrency"])
        series.append(Series(
            f"{label} context",
            [(float(r["concurrency"]), r["p50"], f"{label} × {r['concurrency']}: p50 {fmt_ms(r['p50'])}, p90 {fmt_ms(r['p90'])}, "
              f"p99 {fmt_ms(r['p99'])}") for r in mine],
            band=[(float(r["concurrency"]), r["p50"], r["p99"] if r["p99"] is not None else r["p50"]) for r in mine],
            dashed=[(float(r["concurrency"]), r["p90"]) for r in mine if r["p90"] is not None],
        ))
    series.sort(key=lambda s: parse_context(s.label.split()[0]))
    cid = f"{metric}-percentiles"
    title = f"{name} percentiles vs requests at once"
    svg = line_chart(series, title=title, x_label="requests at once (log 2)", y_label=f"{name} (ms)", x_format=_n_axis,
                     y_format=compact_number, chart_id=cid)
    return Chart(cid, title, "Line: p50 · dashed: p90 · band: p50 to p99, from the cell's HDR histogram.", svg)


def report_charts(d: ReportData) -> tuple[list[Chart], list[str]]:
    """The charts this run has data for, in page order, and notes on the ones it has not."""
    charts: list[Chart] = []
    notes: list[str] = []
    if d.decode:
        decode = _decode_charts(d)
        charts += decode[:2]
    if d.prefill:
        charts += _prefill_charts(d)
    if d.decode:
        charts.append(decode[2])
        bands = [c for c in (_percentile_chart(d, "ttft", "TTFT"), _percentile_chart(d, "tbt", "TBT")) if c]
        charts += bands
        if not bands:
            why = " (an imported page publishes medians only)" if d.run.get("status") == "imported" else ""
            notes.append(f"No latency distributions are stored for this run{why}, so there are no percentile bands.")
    return charts, notes
