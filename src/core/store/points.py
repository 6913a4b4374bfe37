"""Open-loop load points in the store: one point (its row and its requests) per transaction, like a cell.

Tables and the ``load_points`` view are in ``load.sql`` (docs/load.md); the runner builds the rows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from infermatrix.core.store.store import Bulk, Store
from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.trace_store import trace_statements

__all__ = ["POINT_STATUSES", "POINT_COLUMNS", "POINT_REQUEST_COLUMNS", "BURST_COLUMNS", "INTERFERENCE_COLUMNS", "save_point", "kind_row_statements", "done_points"]

POINT_STATUSES = ("valid", "client_bound", "error", "over_capacity", "interrupted")  # over_capacity: an interference point that cannot fit
POINT_COLUMNS = (
    "run_id", "point", "label", "arrival", "requested_rate", "duration_s", "context_tokens", "max_output", "max_in_flight",
    "seed", "scheduled", "scheduled_rate", "sent", "achieved_rate", "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "lag_bound_ms",
    "ks_d", "ks_p", "queued", "max_queue", "status", "reason", "completed", "failed", "output_tokens", "output_tps",
    "ttft_p50_ms", "ttft_p99_ms", "ttft_sent_p50_ms", "ttft_sent_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "origin",
    "started_at", "finished_at", "saved_at",
)  # fmt: skip
POINT_REQUEST_COLUMNS = (
    "run_id", "point", "request_no", "request_id", "scheduled", "sent", "first_token", "ended", "lag_ms", "queue_ms",
    "ttft_ms", "ttft_sent_ms", "e2e_ms", "e2e_sent_ms", "prompt_tokens", "output_tokens", "outcome", "error", "ttfo_ms", "reasoning",
    "reasoning_tokens",
)  # fmt: skip

# The rows of one kind of point beside its points row: a burst's (burst.sql), an interference point's (interference.sql).
BURST_COLUMNS = (
    "run_id", "point", "requests", "concurrency", "natural_stop", "first_sent", "last_end", "duration_s", "tail_start", "tail_s",
    "steady_request_rate", "steady_output_tps", "ttfo_p50_ms", "ttfo_p99_ms",
)  # fmt: skip
INTERFERENCE_COLUMNS = (
    "run_id", "point", "decode_streams", "decode_context", "prefills", "prefill_rate", "warmup_s", "window_s", "window_start",
    "window_end", "tbt_alone_ms", "tbt_alone_p99_ms", "alone_gaps", "tbt_during_ms", "tbt_p99_during_ms", "stall_max_ms",
    "during_gaps", "prefill_ttft_ms", "prefill_ttft_max_ms", "prefill_ttft_alone_ms",
)  # fmt: skip


def save_point(store: Store, run_id: str, point: dict[str, Any], requests: list[dict[str, Any]]) -> None:
    """Save (or replace) one point and its requests in ONE transaction; keys are column names."""
    if point.get("status") not in POINT_STATUSES:
        raise StoreError(f"point {point.get('point')}: unknown status {point.get('status')!r} (expected one of {', '.join(POINT_STATUSES)})")
    row = {**point, "run_id": run_id, "saved_at": dt.datetime.now(dt.UTC).replace(tzinfo=None)}
    key = [run_id, point["point"]]
    reqs = [[run_id if c == "run_id" else point["point"] if c == "point" else r.get(c) for c in POINT_REQUEST_COLUMNS] for r in requests]
    statements: list[tuple[Any, Any]] = [
        ("DELETE FROM point_requests WHERE run_id = ? AND point = ?", key),
        (f"INSERT OR REPLACE INTO points ({', '.join(POINT_COLUMNS)}) VALUES ({', '.join('?' for _ in POINT_COLUMNS)})",
         [row.get(c) for c in POINT_COLUMNS]),
        (Bulk, ("point_requests", POINT_REQUEST_COLUMNS, reqs)),
    ]  # fmt: skip
    statements += trace_statements(run_id, point, requests)  # a trace replay's own rows (trace.sql), same transaction
    statements += kind_row_statements("bursts", BURST_COLUMNS, run_id, point, point.get("burst"))  # burst.sql
    statements += kind_row_statements("interference_points", INTERFERENCE_COLUMNS, run_id, point, point.get("mixed"))  # interference.sql
    store._require_run(run_id)
    store._transaction(f"load point {point['point']} of run {run_id}", statements)


def kind_row_statements(table: str, columns: tuple[str, ...], run_id: str, point: dict[str, Any], row: dict[str, Any] | None) -> list[tuple[Any, Any]]:
    """Replace the point's row in a table of one kind of point (a burst's, an interference point's), in the transaction
    of its ``points`` row: a delete always (a point re-run as another kind leaves none), an insert when ``row`` holds one."""
    key = [run_id, point["point"]]
    out: list[tuple[Any, Any]] = [(f"DELETE FROM {table} WHERE run_id = ? AND point = ?", key)]
    if row:
        full = {**row, "run_id": run_id, "point": point["point"]}
        out.append((f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})", [full.get(c) for c in columns]))
    return out


def done_points(store: Store, run_id: str, retry_errors: bool = False) -> set[int]:
    """Indexes of the points resume skips: any status but 'interrupted' (and 'error' with ``retry_errors``)."""
    final = [s for s in POINT_STATUSES if s != "interrupted" and not (retry_errors and s == "error")]
    _, found = store.query("SELECT point FROM points WHERE run_id = ? AND list_contains(?, status)", [run_id, final])
    return {int(r[0]) for r in found}
