"""GPU telemetry samples per cell (table ``gpu_samples``), created on first use.

Kept out of schema.sql on purpose: a database written before telemetry existed gains the table the
first time a run on a GPU machine saves samples, and nothing else changes.

    save_gpu_samples(store, run_id, context_tokens, concurrency, samples)   # samples from GpuSampler

``context_tokens`` and ``concurrency`` name the cell (a prefill probe: concurrency 0). The view
``gpu_cell_summary`` gives per cell and GPU the mean power, SM clock and utilisation, and peak memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["save_gpu_samples", "ensure_gpu_tables", "GPU_SAMPLE_COLUMNS"]

GPU_SAMPLE_COLUMNS = (
    "run_id", "context_tokens", "concurrency", "t", "t_mono", "gpu",
    "power_w", "sm_clock_mhz", "memory_used_mib", "utilization_pct", "temperature_c",
)

_DDL = """
CREATE TABLE IF NOT EXISTS gpu_samples (
    run_id VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency INTEGER NOT NULL,
    t DOUBLE NOT NULL,            -- wall-clock epoch seconds
    t_mono DOUBLE,                -- time.monotonic(), the clock of cells.window_start/window_end
    gpu INTEGER NOT NULL,
    power_w DOUBLE,
    sm_clock_mhz DOUBLE,
    memory_used_mib DOUBLE,
    utilization_pct DOUBLE,
    temperature_c DOUBLE
)
"""
_VIEW = """
CREATE OR REPLACE VIEW gpu_cell_summary AS
SELECT run_id, context_tokens, concurrency, gpu, count(*) AS samples,
       avg(power_w) AS power_w, avg(sm_clock_mhz) AS sm_clock_mhz, avg(utilization_pct) AS utilization_pct,
       max(memory_used_mib) AS memory_used_mib_max, max(temperature_c) AS temperature_c_max
FROM gpu_samples GROUP BY ALL
"""


def ensure_gpu_tables(store: Any) -> None:
    """Create ``gpu_samples`` and its view if the database lacks them."""
    store.query(_DDL)
    store.query(_VIEW)


def _row(run_id: str, context_tokens: int, concurrency: int, s: Any) -> list[Any]:
    d = s.as_dict() if hasattr(s, "as_dict") else dict(s)
    return [run_id, context_tokens, concurrency, *(d.get(c) for c in GPU_SAMPLE_COLUMNS[3:])]


def save_gpu_samples(store: Any, run_id: str, context_tokens: int, concurrency: int, samples: Iterable[Any]) -> int:
    """Replace the cell's samples with ``samples`` (``GpuSample`` objects or dicts); returns how many.

    One INSERT statement, so a cell's samples land whole or not at all; saving a cell again (a
    resumed run re-measuring it) replaces its earlier samples."""
    rows = [_row(run_id, context_tokens, concurrency, s) for s in samples]
    ensure_gpu_tables(store)
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
