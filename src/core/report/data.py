"""A run's report data, read once from the contract views (and the runs table).

Every renderer (text, Markdown, JSON, HTML) starts from :func:`load_report`, so what a report says
is exactly what ``infermatrix sql`` would show; nothing comes from in-memory results.
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.contexts import parse_context
from infermatrix.core.report.fmt import (  # re-exported: renderers and the CLI import them from here
    DASH,
    STATUS_LABELS,
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
from infermatrix.core.report.openloop import load_point_rows
from infermatrix.core.report.workload_report import WorkloadReport, load_workload_report
from infermatrix.core.report.trace_report import load_trace_rows
from infermatrix.core.report.slo_report import SloReport, load_slo_report
from infermatrix.core.store import Store, StoreError

__all__ = [
    "ReportData",
    "load_report",
    "DASH",
    "STATUS_LABELS",
    "fmt_tps",
    "fmt_ms",
    "fmt_int",
    "fmt_float1",
    "fmt_seconds",
    "fmt_tokens",
    "fmt_duration",
    "fmt_time",
    "status_label",
]


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
    traces: list[dict[str, Any]] = field(default_factory=list)  # trace-replay points with their arrivals (trace_report.py)
    slo: SloReport = field(default_factory=SloReport)  # SLO, capacity, frontier, engine statistics (docs/slo.md)
    workload: WorkloadReport = field(default_factory=WorkloadReport)  # a workload's own pass (docs/workloads.md)

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


_METRIC_ORDER = {"ttft": 0, "tbt": 1, "e2e": 2, "itl": 3}


def _latency_order(r: dict[str, Any]) -> tuple:
    # The view has labels, not token counts (contract columns); parse them back to sort 8K < 16K.
    return (parse_context(r["context_label"]), r["concurrency"], _METRIC_ORDER.get(r["metric"], 9), r["metric"])


def _rows(store: Store, sql: str, run_id: str) -> list[dict[str, Any]]:
    cols, rows = store.query(sql, [run_id])
    return [dict(zip(cols, r)) for r in rows]


def load_report(store: Store, run_id: str | None) -> ReportData:
    """Fetch everything a report shows for ``run_id`` (a unique prefix works; ``None`` = latest)."""
    run_id = store.resolve_run(run_id)
    run = store.get_run(run_id)
    if run is None:  # resolve_run just found it; only a concurrent delete gets here
        raise StoreError(f"no run {run_id!r} in {store.path}")
    details = _rows(
        store,
        "SELECT context_tokens, concurrency, reason, requests, failed_requests, looped_requests, token_source "
        "FROM decode_details WHERE run_id = ?",
        run_id,
    )
    flags = {
        (r["context_tokens"], r["concurrency"]): r["flags"]
        for r in _rows(store, "SELECT context_tokens, concurrency, flags FROM cells WHERE run_id = ?", run_id)
    }
    for key, d in {(d["context_tokens"], d["concurrency"]): d for d in details}.items():
        raw = flags.get(key)
        d["flags"] = json.loads(raw) if isinstance(raw, str) else (raw or {})
    return ReportData(
        run=run,
        prefill=_rows(store, "SELECT * FROM prefill_list WHERE run_id = ? ORDER BY context_tokens", run_id),
        decode=_rows(store, "SELECT * FROM decode_matrix WHERE run_id = ? ORDER BY context_tokens, concurrency", run_id),
        latency=sorted(_rows(store, "SELECT * FROM latency_percentiles WHERE run_id = ?", run_id), key=_latency_order),
        details={(d["context_tokens"], d["concurrency"]): d for d in details},
        points=load_point_rows(store, run_id),
        traces=load_trace_rows(store, run_id),
        slo=load_slo_report(store, [run_id]),
        workload=load_workload_report(store, run_id),
    )
