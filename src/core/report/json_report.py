"""The report and the comparison as plain JSON-ready data: view rows under stable keys, for scripts and dashboards."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from infermatrix.core.report.compare_data import METRICS, Comparison, load_comparison
from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.report.sections.telemetry_compare import telemetry_pairs
from infermatrix.core.store import Store

__all__ = ["json_plain", "render_json", "json_of", "REPORT_FORMAT", "REPORT_VERSION", "TOP_KEYS", "render_compare_json", "compare_json_of",
           "COMPARE_FORMAT", "COMPARE_VERSION", "COMPARE_KEYS"]

REPORT_FORMAT = "infermatrix.report"
REPORT_VERSION = 1
# Top-level keys, always present (lists may be empty). Row keys are the views' columns.
# Keys added later go at the end (a reader of version 1 keeps working): "bursts" (issue 31); compare's "telemetry" (issue 32);
# "interference" in both (issue 31 item 3).
TOP_KEYS = ("format", "version", "run", "prefill", "decode", "latency", "slo", "trace", "points", "workload", "bursts", "interference")
COMPARE_FORMAT = "infermatrix.compare"
COMPARE_VERSION = 1
COMPARE_KEYS = ("format", "version", "baseline", "runs", "method", "pairs", "best", "bursts", "telemetry", "interference")


def json_plain(v: Any) -> Any:
    """A value as JSON holds it: times as ISO strings (UTC), NaN as null, tables and lists through."""
    if isinstance(v, dt.datetime):
        return v.isoformat() + ("Z" if v.tzinfo is None else "")  # stored times are UTC
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: json_plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_plain(x) for x in v]
    return v


def _intervals_json(ivs: dict[str, Any]) -> dict[str, Any]:
    """A row's intervals, metric -> ``{lo, hi, method, n}`` (the value is the row's own number)."""
    return {m: {"lo": iv.lo, "hi": iv.hi, "method": iv.method, "n": iv.n} for m, iv in sorted(ivs.items())}


def json_of(d: ReportData) -> dict[str, Any]:
    """``{format, version, run, prefill, decode, latency, slo, trace, points, workload, bursts, interference}`` for an already loaded report.

    ``run`` is the runs row (JSON columns as objects); ``prefill`` rows are prefill_list rows plus ``intervals`` (the
    point's prefill_intervals rows, metric -> ``{lo, hi, method, n}``; empty for points without them),
    ``decode`` rows are decode_matrix rows plus ``reason`` and ``intervals`` (the cell's cell_intervals rows,
    metric -> ``{lo, hi, method, n}``, and for a cell of K > 1 repeats ``repeats, sd, window_lo, window_hi, noisier``;
    empty for cells without them: not valid, older stores, imported pages), ``telemetry``: ``{engine: the cell's
    engine_cells row, energy: its gpu_cells row}``, each null where nothing was read (docs/telemetry.md), ``latency`` rows latency_percentiles rows;
    ``slo`` holds the rows of slo_cells, slo_capacity, frontier and cell_engine_stats (docs/slo.md), and of slo_search
    and slo_search_probes (``search``, ``search_probes``; docs/load.md), and ``price``: the run's run_gpus row (its GPUs,
    the GPU-hour price its costs used, ``gpu_hour_source`` report/stored/config, ``stored_gpu_hour_usd``);
    ``trace`` one object per trace-replay point: its trace_points row, its load_points figures and
    ``arrivals`` (trace_arrivals rows; docs/load.md);
    ``points`` the run's load_points rows (open-loop, trace and burst points, in point order; docs/load.md);
    ``bursts`` the run's burst_points rows (docs/load.md, "Bursts");
    ``interference`` the run's interference rows (docs/load.md, "Interference");
    ``workload`` the workload pass (docs/workloads.md): ``reuse`` (the prefix_reuse row, null without a pass),
    ``turns`` (turns rows), ``ttft_by_cached_fraction`` (its rows, by band) and ``tasks`` (task_results rows, by task
    set: the tasks workload).
    """
    decode = []
    for r in d.decode:
        row = dict(r)
        row["reason"] = d.reason(r["context_tokens"], r["concurrency"])
        ivs = d.intervals.get((r["context_tokens"], r["concurrency"]), {})
        row["intervals"] = _intervals_json(ivs)
        tel = d.telemetry.get((r["context_tokens"], r["concurrency"]), {})
        row["telemetry"] = {"engine": tel.get("engine"), "energy": tel.get("gpu")}  # engine_cells, gpu_cells (docs/telemetry.md)
        for m, spread in d.spreads.get((r["context_tokens"], r["concurrency"]), {}).items():  # repeats: the spread beside it
            if m in row["intervals"]:
                row["intervals"][m].update({k: spread[k] for k in ("repeats", "sd", "window_lo", "window_hi", "noisier")})
        decode.append(row)
    prefill = []
    for p in d.prefill:
        row = dict(p)
        row["intervals"] = _intervals_json(d.prefill_intervals.get(p["context_tokens"], {}))
        prefill.append(row)
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "run": json_plain(d.run),
        "prefill": json_plain(prefill),
        "decode": json_plain(decode),
        "latency": json_plain(d.latency),
        "slo": json_plain({"cells": d.slo.cells, "capacity": d.slo.capacity, "frontier": d.slo.frontier, "engine_stats": d.slo.engine_stats,
                      "search": d.slo.search, "search_probes": d.slo.search_probes, "price": d.slo.gpus.get(d.run_id)}),
        "trace": json_plain(d.traces),
        "points": json_plain(d.points),
        "workload": json_plain({"reuse": d.workload.reuse, "turns": d.workload.turns, "ttft_by_cached_fraction": d.workload.bands,
                               "tasks": d.workload.tasks}),
        "bursts": json_plain(d.bursts),
        "interference": json_plain(d.interference),
    }


def render_json(store: Store, run_id: str | None) -> dict[str, Any]:
    """The report of ``run_id`` (prefix ok; ``None`` = latest run) as a JSON-serialisable dict."""
    return json_of(load_report(store, run_id))


def _cell_metric(c: Any, key: str, a: float | None, b: float | None, r: float | None) -> dict[str, Any]:
    """One metric of a compared cell: values, ratio, the ratio's interval and the verdict (same / faster / slower)."""
    judged = c.judged.get(key)
    if judged is None:
        return {"value_a": a, "value_b": b, "ratio": r, "ratio_lo": None, "ratio_hi": None, "verdict": None, "method": None}
    return {"value_a": a, "value_b": b, "ratio": r, "ratio_lo": judged.lo, "ratio_hi": judged.hi, "verdict": judged.verdict,
            "method": judged.method}


def compare_json_of(cmp: Comparison) -> dict[str, Any]:
    """``{format, version, baseline, runs, method, pairs, best, bursts, telemetry, interference}``; ``interference``: as
    ``bursts``, for interference points sent alike (docs/load.md, "Interference"); ``telemetry``: each decode cell with
    engine or GPU reads in the baseline and another run, both sides' engine_cells / gpu_cells rows; ratios are other / baseline; ``bursts``: each burst
    valid in the baseline and another run, sent alike, with its burst_points rows and per metric the ratio and its word
    by the fixed rule (docs/load.md, "Bursts")."""
    pairs = []
    for pair in cmp.pairs.values():
        pairs.append({
            "run_a": cmp.baseline,
            "run_b": pair.run_b,
            "cells": [{
                "context_label": c.context_label, "context_tokens": c.context_tokens, "concurrency": c.concurrency,
                "metrics": {m.key: _cell_metric(c, m.key, *c.values.get(m.key, (None, None, None))) for m in METRICS},
            } for c in pair.cells],
            "one_sided": [{"context_label": o.context_label, "context_tokens": o.context_tokens, "concurrency": o.concurrency,
                           "valid_in": pair.run_b if o.valid_in == "b" else cmp.baseline, "a": o.a, "b": o.b,
                           "verdict": "not comparable"} for o in pair.one_sided],
            "geomean": {m.key: pair.geomean.get(m.key) for m in METRICS},
            "geomean_interval": {m.key: pair.geomean_interval.get(m.key) for m in METRICS},
            "fixed_rule": pair.fixed_rule,
            "tasks": [{"task_set": t.task_set, "a": t.a, "b": t.b, "test": t.test, "p_value": t.p_value, "verdict": t.verdict,
                       "a_only_right": t.a_only, "b_only_right": t.b_only, "output_tokens_ratio": t.output_ratio}
                      for t in cmp.tasks.get(pair.run_b, [])],
        })
    return json_plain({
        "format": COMPARE_FORMAT,
        "version": COMPARE_VERSION,
        "baseline": cmp.baseline,
        "runs": [{"letter": cmp.letters[rid], **{k: run.get(k) for k in (
            "run_id", "name", "engine", "engine_version", "model", "status", "source", "duration_s", "max_output",
            "api", "prompt_mode", "token_source", "started_at")}} for rid, run in cmp.runs.items()],
        "method": {"differs": cmp.method_diffs, "not_recorded": cmp.method_unknown},
        "pairs": pairs,
        "best": [{"context_label": b.context_label, "context_tokens": b.context_tokens, "concurrency": b.concurrency,
                  "run_id": b.best, "total_tps": b.total_tps, "runner_up": b.runner_up, "margin": b.margin, "same": b.same}
                 for b in cmp.best],
        "bursts": [{"run_a": cmp.baseline, "run_b": p.run_b, "a": p.a, "b": p.b,
                    "ratios": {k: {"ratio": r, "verdict": w} for k, (r, w) in p.ratios.items()}} for p in cmp.bursts],
        "telemetry": json_plain([{"run_a": cmp.baseline, "run_b": rid, "context_tokens": ctx, "concurrency": n, "a": ta, "b": tb}
                             for rid, (ctx, n), ta, tb in telemetry_pairs(cmp)]),
        "interference": json_plain([{"run_a": cmp.baseline, "run_b": p.run_b, "a": p.a, "b": p.b,
                                 "ratios": {k: {"ratio": r, "verdict": w} for k, (r, w) in p.ratios.items()}} for p in cmp.interference]),
    })


def render_compare_json(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """The comparison of ``run_ids`` (the first is the baseline) as a JSON-serialisable dict."""
    return compare_json_of(load_comparison(store, run_ids))
