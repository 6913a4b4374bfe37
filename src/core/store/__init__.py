"""The results store (DuckDB): tables of our own design, SQL views that are a public contract.

Tables (schema.sql): runs, prefill, cells (PK run, context, concurrency; re-saving replaces),
requests (every streamed request of a cell; output text kept only for looped ones, last 4 KB),
histograms (HDR, microseconds, base64 text), histogram_percentiles (decoded at save time, because
DuckDB can't decode HDR), schema_version.

Contract views (views.sql; DESIGN.md §4): prefill_list, decode_matrix, engine_comparison,
latency_percentiles. Helpers: the macros context_label(tokens) and
latency_at(run_id, context_tokens, concurrency, metric, p) — latency in ms at the nearest stored
percentile >= p (grid 0, 1 … 99, 99.1 … 99.9, 99.99, 100) — and the views decode_details, run_summary.
"""

from infermatrix.core.store.errors import QueryError, StoreError
from infermatrix.core.store.runs import RUN_COLUMNS, RUN_STATUSES, run_info
from infermatrix.core.store.store import DEFAULT_DB, FINAL_CELL_STATUSES, PREFILL_STATUSES, Store, open_store

__all__ = [
    "Store",
    "StoreError",
    "QueryError",
    "open_store",
    "run_info",
    "DEFAULT_DB",
    "RUN_COLUMNS",
    "RUN_STATUSES",
    "PREFILL_STATUSES",
    "FINAL_CELL_STATUSES",
]
