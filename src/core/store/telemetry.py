"""GPU telemetry samples per cell (table ``gpu_samples`` and view ``gpu_cell_summary``: telemetry.sql).

    save_gpu_samples(store, run_id, context_tokens, concurrency, samples)   # samples from GpuSampler

``context_tokens`` and ``concurrency`` name the cell (a prefill probe: concurrency 0). The view
``gpu_cell_summary`` gives per cell and GPU the mean power, SM clock and utilisation, and peak memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from infermatrix.core.store.store import Bulk

__all__ = ["save_gpu_samples", "GPU_SAMPLE_COLUMNS", "save_series", "save_telemetry_costs", "ENGINE_SAMPLE_COLUMNS", "GPU_SERIES_COLUMNS"]

# The order core/telemetry/recorder.py drains rows in (after run_id): engine_telemetry.sql's tables.
ENGINE_SAMPLE_COLUMNS = ("run_id", "t", "t_mono", "phase", "unit", "context_tokens", "concurrency", "metric", "labels", "value")
GPU_SERIES_COLUMNS = (
    "run_id", "t", "t_mono", "phase", "unit", "context_tokens", "concurrency", "gpu",
    "power_w", "energy_mj", "sm_clock_mhz", "mem_clock_mhz", "memory_used_mib", "utilization_pct", "temperature_c", "throttle_mask",
)
_COST_COLUMNS = ("run_id", "source", "interval_s", "reads", "failures", "cpu_s", "wall_s")

GPU_SAMPLE_COLUMNS = (
    "run_id", "context_tokens", "concurrency", "t", "t_mono", "gpu",
    "power_w", "sm_clock_mhz", "memory_used_mib", "utilization_pct", "temperature_c",
)


def _row(run_id: str, context_tokens: int, concurrency: int, s: Any) -> list[Any]:
    d = s.as_dict() if hasattr(s, "as_dict") else dict(s)
    return [run_id, context_tokens, concurrency, *(d.get(c) for c in GPU_SAMPLE_COLUMNS[3:])]


def save_gpu_samples(store: Any, run_id: str, context_tokens: int, concurrency: int, samples: Iterable[Any]) -> int:
    """Replace the cell's samples with ``samples`` (``GpuSample`` objects or dicts); returns how many.

    One INSERT statement, so a cell's samples land whole or not at all; saving a cell again (a
    resumed run re-measuring it) replaces its earlier samples."""
    rows = [_row(run_id, context_tokens, concurrency, s) for s in samples]
    store.query("DELETE FROM gpu_samples WHERE run_id = ? AND context_tokens = ? AND concurrency = ?",
                [run_id, context_tokens, concurrency])  # fmt: skip
    if not rows:
        return 0
    marks = "(" + ", ".join("?" for _ in GPU_SAMPLE_COLUMNS) + ")"
    store.query(
        f"INSERT INTO gpu_samples ({', '.join(GPU_SAMPLE_COLUMNS)}) VALUES " + ", ".join(marks for _ in rows),
        [v for row in rows for v in row],
    )
    return len(rows)


def save_series(store: Any, run_id: str, engine_rows: list[tuple[Any, ...]], gpu_rows: list[tuple[Any, ...]]) -> None:
    """Append telemetry rows (as ``Telemetry.drain`` gives them) to ``engine_samples`` and ``gpu_series``, in one
    transaction. They are a time series of the run, not of a cell: saved between steps, appended, never replaced."""
    statements: list[tuple[Any, Any]] = []
    if engine_rows:
        statements.append((Bulk, ("engine_samples", ENGINE_SAMPLE_COLUMNS, [[run_id, *r] for r in engine_rows])))
    if gpu_rows:
        statements.append((Bulk, ("gpu_series", GPU_SERIES_COLUMNS, [[run_id, *r] for r in gpu_rows])))
    if statements:
        store._transaction("telemetry samples", statements)


def save_telemetry_costs(store: Any, run_id: str, costs: list[dict[str, Any]]) -> None:
    """What each sampler cost (``Telemetry.costs``), added to the run's earlier sessions' (a resumed run has several)."""
    for c in costs:
        store.query(f"INSERT INTO telemetry_costs ({', '.join(_COST_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [run_id, *(c[k] for k in _COST_COLUMNS[1:])])  # fmt: skip
