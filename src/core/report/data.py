"""A run's report data, read once from the contract views (and the runs table).

Every renderer (text, Markdown, JSON, HTML) starts from :func:`load_report`, so what a report says
is exactly what ``infermatrix sql`` would show; nothing comes from in-memory results.
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.contexts import parse_context
from infermatrix.core.intervals import Interval
from infermatrix.core.report.fmt import (  # re-exported: renderers and the CLI import them from here
    DASH,
    STATUS_LABELS,
    fmt_duration,
    fmt_float1,
    fmt_int,
    fmt_ms,
    fmt_ms_pm,
    fmt_seconds,
    fmt_time,
    fmt_tokens,
    fmt_tps,
    fmt_tps_pm,
    status_label,
)
from infermatrix.core.report.query import view_rows
from infermatrix.core.report.slo_report import SloReport, load_slo_report
from infermatrix.core.store import Store, StoreError

__all__ = [
    "ReportData",
    "Intervals",
    "load_intervals",
    "load_spreads",
    "PrefillIntervals",
    "load_prefill_intervals",
    "WorkloadReport",
    "load_report",
    "DASH",
    "STATUS_LABELS",
    "fmt_tps",
    "fmt_ms",
    "fmt_tps_pm",
    "fmt_ms_pm",
    "fmt_int",
    "fmt_float1",
    "fmt_seconds",
    "fmt_tokens",
    "fmt_duration",
    "fmt_time",
    "status_label",
]


Intervals = dict[tuple[int, int], dict[str, Interval]]  # (context tokens, concurrency) -> metric -> its interval


def load_intervals(store: Store, run_id: str) -> Intervals:
    """The run's ``cell_intervals`` rows by cell and metric (none for stores older than v8 and imported pages)."""
    out: Intervals = {}
    for r in view_rows(store, "SELECT * FROM cell_intervals WHERE run_id = ?", [run_id]):
        out.setdefault((r["context_tokens"], r["concurrency"]), {})[r["metric"]] = Interval(r["value"], r["lo"], r["hi"], r["method"], r["n"])
    return out


def load_spreads(store: Store, run_id: str) -> dict[tuple[int, int], dict[str, dict[str, Any]]]:
    """The run-to-run spread of each number of a cell measured in two or more repeats (docs/metrics.md, Repeats)."""
    out: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    sql = ("SELECT context_tokens, concurrency, metric, repeats, sd, window_lo, window_hi, noisier FROM cell_intervals "
           "WHERE run_id = ? AND repeats >= 2")
    for r in view_rows(store, sql, [run_id]):
        out.setdefault((r["context_tokens"], r["concurrency"]), {})[r["metric"]] = r
    return out


PrefillIntervals = dict[int, dict[str, Interval]]  # context tokens -> metric (ttft_ms, prompt_tps) -> its interval


def load_prefill_intervals(store: Store, run_id: str) -> PrefillIntervals:
    """The run's ``prefill_intervals`` rows by point and metric (none for stores older than v10 and imported pages)."""
    out: PrefillIntervals = {}
    for r in view_rows(store, "SELECT * FROM prefill_intervals WHERE run_id = ?", [run_id]):
        out.setdefault(r["context_tokens"], {})[r["metric"]] = Interval(r["value"], r["lo"], r["hi"], r["method"], r["n"])
    return out


@dataclass
class WorkloadReport:
    """A run's workload pass (docs/workloads.md)."""

    reuse: dict[str, Any] | None = None  # the prefix_reuse row
    bands: list[dict[str, Any]] = field(default_factory=list)  # ttft_by_cached_fraction, by band
    turns: list[dict[str, Any]] = field(default_factory=list)  # the turns view, by turn
    params: dict[str, Any] | None = None  # the pass's parameters as run (workload_passes.params), for the header
    tasks: list[dict[str, Any]] = field(default_factory=list)  # task_results rows, by task set (the tasks workload)


@dataclass
class ReportData:
    """One run: its runs row and its rows of prefill_list, decode_matrix, latency_percentiles, and
    decode_details (why each cell has its status), each list in context/concurrency order."""

    run: dict[str, Any]
    prefill: list[dict[str, Any]]
    decode: list[dict[str, Any]]
    latency: list[dict[str, Any]] = field(default_factory=list)
    details: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)  # open-loop points (load_points view), in point order
    traces: list[dict[str, Any]] = field(default_factory=list)  # trace-replay points with their arrivals (load_trace_rows)
    bursts: list[dict[str, Any]] = field(default_factory=list)  # burst points (burst_points view), in point order
    interference: list[dict[str, Any]] = field(default_factory=list)  # interference points (interference view), in point order
    reasoning: bool = False  # some streamed request of the run carried reasoning text: reports show TTFO beside TTFT
    slo: SloReport = field(default_factory=SloReport)  # SLO, capacity, frontier, engine statistics (docs/slo.md)
    workload: WorkloadReport = field(default_factory=WorkloadReport)  # a workload's own pass (docs/workloads.md)
    intervals: Intervals = field(default_factory=dict)  # each valid cell's numbers' 95 % intervals (cell_intervals)
    # a cell of K >= 2 repeats: metric -> its cell_intervals row's repeats, sd, window_lo, window_hi, noisier
    spreads: dict[tuple[int, int], dict[str, dict[str, Any]]] = field(default_factory=dict)
    prefill_intervals: PrefillIntervals = field(default_factory=dict)  # each valid prefill point's (prefill_intervals)
    prefill_reasons: dict[int, str] = field(default_factory=dict)  # context tokens -> why the prefill point has its status
    # per decode cell: {"engine": its engine_cells row, "gpu": its gpu_cells row, "timeline": metric -> [(s, value)]},
    # each absent where nothing was read (docs/telemetry.md)
    telemetry: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def contexts(self) -> list[int]:
        """Decode-matrix rows (token counts), ascending."""
        return sorted({r["context_tokens"] for r in self.decode})

    @property
    def concurrencies(self) -> list[int]:
        """Decode-matrix columns, ascending."""
        return sorted({r["concurrency"] for r in self.decode})

    def cell(self, context_tokens: int, concurrency: int) -> dict[str, Any] | None:
        return self._cells.get((context_tokens, concurrency))

    def bounds(self, row: dict[str, Any], metric: str) -> tuple[float | None, float | None] | None:
        """``(lo, hi)`` of a decode row's number, for fmt's ``±``; None where the cell has no interval for it."""
        iv = self.intervals.get((row["context_tokens"], row["concurrency"]), {}).get(metric)
        return None if iv is None else (iv.lo, iv.hi)

    def prefill_bounds(self, row: dict[str, Any], metric: str) -> tuple[float | None, float | None] | None:
        """``(lo, hi)`` of a prefill_list row's number, for fmt's ``±``; None where the point has no interval for it —
        also where both ends are NULL (one probe: there is no interval at all, not one open on a side)."""
        iv = self.prefill_intervals.get(row["context_tokens"], {}).get(metric)
        return None if iv is None or (iv.lo is None and iv.hi is None) else (iv.lo, iv.hi)

    def reason(self, context_tokens: int, concurrency: int) -> str | None:
        d = self.details.get((context_tokens, concurrency))
        return d.get("reason") if d else None

    @property
    def statuses(self) -> list[str]:
        """Decode statuses present, in CELL_STATUSES order."""
        present = {r["status"] for r in self.decode}
        return [s for s in STATUS_LABELS if s in present] + sorted(present - set(STATUS_LABELS))

    def setting(self, column: str, *config_path: str) -> Any:
        """A run setting: its runs column, else the stored config JSON (older or imported runs)."""
        value = self.run.get(column)
        if value is not None:
            return value
        node: Any = self.run.get("config") or {}
        for key in config_path:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node

    def __post_init__(self) -> None:
        self._cells = {(r["context_tokens"], r["concurrency"]): r for r in self.decode}


_METRIC_ORDER = {"ttft": 0, "ttfo": 1, "tbt": 2, "e2e": 3, "itl": 4}


def _reasoning_seen(store: Store, run_id: str) -> bool:
    """Whether any streamed request of the run (a cell's or a point's) carried reasoning text (docs/metrics.md, TTFO)."""
    rows = view_rows(store, "SELECT (SELECT count(*) FROM requests WHERE run_id = ? AND reasoning) + "
                            "(SELECT count(*) FROM point_requests WHERE run_id = ? AND reasoning) AS n", [run_id, run_id])  # fmt: skip
    return bool(rows and rows[0]["n"])


def _latency_order(r: dict[str, Any]) -> tuple:
    # The view has labels, not token counts (contract columns); parse them back to sort 8K < 16K.
    return (parse_context(r["context_label"]), r["concurrency"], _METRIC_ORDER.get(r["metric"], 9), r["metric"])


def load_point_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's ``load_points`` rows in point order."""
    # With the settings each point used (the points table's), for the header's rows (point_settings.py).
    return view_rows(store, "SELECT v.*, p.duration_s, p.max_output FROM load_points v JOIN points p USING (run_id, point) "
                            "WHERE v.run_id = ? ORDER BY v.point", [run_id])  # fmt: skip


def load_trace_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """One dict per trace point of the run: its trace_points row, its load_points figures, and ``arrivals``
    (the trace_arrivals rows, per second)."""
    rows = view_rows(
        store,
        "SELECT t.*, p.label, p.status, p.reason, p.requested_rate, p.achieved_rate, p.scheduled, p.sent, p.completed, "
        "p.lag_p50_ms, p.lag_p99_ms, p.lag_bound_ms, p.ttft_p50_ms, p.ttft_p99_ms, p.e2e_p50_ms, p.output_tps "
        "FROM trace_points t JOIN load_points p USING (run_id, point) WHERE t.run_id = ? ORDER BY t.point",
        [run_id],
    )
    for row in rows:
        row["arrivals"] = view_rows(store, "SELECT second, requested, sent, lag_max_ms FROM trace_arrivals WHERE run_id = ? AND point = ? "
                                           "ORDER BY second", [run_id, row["point"]])  # fmt: skip
    return rows


def load_workload_report(store: Store, run_id: str) -> WorkloadReport:
    """The run's workload pass (empty where it has none)."""
    reuse = view_rows(store, "SELECT * FROM prefix_reuse WHERE run_id = ?", [run_id])
    params = view_rows(store, "SELECT params FROM workload_passes WHERE run_id = ?", [run_id])
    raw = params[0]["params"] if params else None
    return WorkloadReport(
        reuse=reuse[0] if reuse else None,
        params=json.loads(raw) if isinstance(raw, str) else raw,
        bands=view_rows(store, "SELECT * FROM ttft_by_cached_fraction WHERE run_id = ? ORDER BY band", [run_id]),
        turns=view_rows(store, "SELECT * FROM turns WHERE run_id = ? ORDER BY turn", [run_id]),
        tasks=view_rows(store, "SELECT * FROM task_results WHERE run_id = ? ORDER BY task_set", [run_id]),
    )


def load_telemetry(store: Store, run_id: str) -> dict[tuple[int, int], dict[str, Any]]:
    """Each decode cell's engine_cells and gpu_cells rows (the ones with a read in their window), and its timeline."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for key, view, has in (("engine", "engine_cells", "samples > 0"), ("gpu", "gpu_cells", "energy_j IS NOT NULL OR samples > 0")):
        for r in view_rows(store, f"SELECT * FROM {view} WHERE run_id = ? AND ({has})", [run_id]):
            out.setdefault((r["context_tokens"], r["concurrency"]), {})[key] = r
    # each cell's step as a timeline (the HTML report's charts): seconds from its window's start, every read of its step
    sql = ("SELECT e.context_tokens, e.concurrency, e.t_mono - c.window_start AS s, e.metric, e.value FROM engine_series e "
           "JOIN cells c USING (run_id, context_tokens, concurrency) WHERE e.run_id = ? AND e.concurrency > 0 "
           "AND e.metric IN ('running', 'waiting', 'kv_usage') "
           "UNION ALL SELECT g.context_tokens, g.concurrency, g.t_mono - c.window_start, 'power_w ' || g.gpu, g.power_w FROM gpu_series g "
           "JOIN cells c USING (run_id, context_tokens, concurrency) WHERE g.run_id = ? AND g.concurrency > 0 AND g.power_w IS NOT NULL "
           "ORDER BY 3")  # fmt: skip
    for r in view_rows(store, sql, [run_id, run_id]):
        cell = out.get((r["context_tokens"], r["concurrency"]))
        if cell is not None and r["s"] is not None:
            cell.setdefault("timeline", {}).setdefault(r["metric"], []).append((r["s"], r["value"]))
    return out


def load_report(store: Store, run_id: str | None) -> ReportData:
    """Fetch everything a report shows for ``run_id`` (a unique prefix works; ``None`` = latest)."""
    run_id = store.resolve_run(run_id)
    run = store.get_run(run_id)
    if run is None:  # resolve_run just found it; only a concurrent delete gets here
        raise StoreError(f"no run {run_id!r} in {store.path}")
    details = view_rows(
        store,
        "SELECT context_tokens, concurrency, reason, requests, failed_requests, looped_requests, token_source "
        "FROM decode_details WHERE run_id = ?",
        [run_id],
    )
    flags = {
        (r["context_tokens"], r["concurrency"]): r["flags"]
        for r in view_rows(store, "SELECT context_tokens, concurrency, flags FROM cells WHERE run_id = ?", [run_id])
    }
    for key, d in {(d["context_tokens"], d["concurrency"]): d for d in details}.items():
        raw = flags.get(key)
        d["flags"] = json.loads(raw) if isinstance(raw, str) else (raw or {})
    return ReportData(
        run=run,
        prefill=view_rows(store, "SELECT * FROM prefill_list WHERE run_id = ? ORDER BY context_tokens", [run_id]),
        decode=view_rows(store, "SELECT * FROM decode_matrix WHERE run_id = ? ORDER BY context_tokens, concurrency", [run_id]),
        latency=sorted(view_rows(store, "SELECT * FROM latency_percentiles WHERE run_id = ?", [run_id]), key=_latency_order),
        details={(d["context_tokens"], d["concurrency"]): d for d in details},
        points=load_point_rows(store, run_id),
        traces=load_trace_rows(store, run_id),
        bursts=view_rows(store, "SELECT * FROM burst_points WHERE run_id = ? ORDER BY point", [run_id]),
        interference=view_rows(store, "SELECT * FROM interference WHERE run_id = ? ORDER BY point", [run_id]),
        reasoning=_reasoning_seen(store, run_id),
        slo=load_slo_report(store, [run_id]),
        workload=load_workload_report(store, run_id),
        intervals=load_intervals(store, run_id),
        spreads=load_spreads(store, run_id),
        prefill_intervals=load_prefill_intervals(store, run_id),
        prefill_reasons={r["context_tokens"]: r["reason"] for r in view_rows(
            store, "SELECT context_tokens, reason FROM prefill WHERE run_id = ? AND reason IS NOT NULL", [run_id])},  # fmt: skip
        telemetry=load_telemetry(store, run_id),
    )
