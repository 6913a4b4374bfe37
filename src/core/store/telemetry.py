"""GPU telemetry samples per cell (table ``gpu_samples`` and view ``gpu_cell_summary``: telemetry.sql).

    save_gpu_samples(store, run_id, context_tokens, concurrency, samples)   # samples from GpuSampler

``context_tokens`` and ``concurrency`` name the cell (a prefill probe: concurrency 0). The view
``gpu_cell_summary`` gives per cell and GPU the mean power, SM clock and utilisation, and peak memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["save_gpu_samples", "GPU_SAMPLE_COLUMNS"]

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
