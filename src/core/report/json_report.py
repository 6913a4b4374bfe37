"""The report as plain JSON-ready data: view rows under stable keys, for scripts and dashboards."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from infermatrix.core.report.data import ReportData, load_report
from infermatrix.core.store import Store

__all__ = ["render_json", "json_of", "REPORT_FORMAT", "REPORT_VERSION", "TOP_KEYS"]

REPORT_FORMAT = "infermatrix.report"
REPORT_VERSION = 1
# Top-level keys, always present (lists may be empty). Row keys are the views' columns.
TOP_KEYS = ("format", "version", "run", "prefill", "decode", "latency", "slo", "trace", "points", "workload")


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat() + ("Z" if v.tzinfo is None else "")  # stored times are UTC
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def json_of(d: ReportData) -> dict[str, Any]:
    """``{format, version, run, prefill, decode, latency, slo, trace, points, workload}`` for an already loaded report.

    ``run`` is the runs row (JSON columns as objects); ``prefill`` rows are prefill_list rows,
    ``decode`` rows are decode_matrix rows plus ``reason``, ``latency`` rows latency_percentiles rows;
    ``slo`` holds the rows of slo_cells, slo_capacity, frontier and cell_engine_stats (docs/slo.md), and of slo_search
    and slo_search_probes (``search``, ``search_probes``; docs/load.md), and ``price``: the run's run_gpus row (its GPUs,
    the GPU-hour price its costs used, ``gpu_hour_source`` report/stored/config, ``stored_gpu_hour_usd``);
    ``trace`` one object per trace-replay point: its trace_points row, its load_points figures and
    ``arrivals`` (trace_arrivals rows; docs/load.md);
    ``points`` the run's load_points rows (open-loop and trace points, in point order; docs/load.md);
    ``workload`` the workload pass (docs/workloads.md): ``reuse`` (the prefix_reuse row, null without a pass),
    ``turns`` (turns rows) and ``ttft_by_cached_fraction`` (its rows, by band).
    """
    decode = []
    for r in d.decode:
        row = dict(r)
        row["reason"] = d.reason(r["context_tokens"], r["concurrency"])
        decode.append(row)
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "run": _plain(d.run),
        "prefill": _plain(d.prefill),
        "decode": _plain(decode),
        "latency": _plain(d.latency),
        "slo": _plain({"cells": d.slo.cells, "capacity": d.slo.capacity, "frontier": d.slo.frontier, "engine_stats": d.slo.engine_stats,
                      "search": d.slo.search, "search_probes": d.slo.search_probes, "price": d.slo.gpus.get(d.run_id)}),
        "trace": _plain(d.traces),
        "points": _plain(d.points),
        "workload": _plain({"reuse": d.workload.reuse, "turns": d.workload.turns, "ttft_by_cached_fraction": d.workload.bands}),
    }


def render_json(store: Store, run_id: str | None) -> dict[str, Any]:
    """The report of ``run_id`` (prefix ok; ``None`` = latest run) as a JSON-serialisable dict."""
    return json_of(load_report(store, run_id))
