"""Open-loop load points in the store: one point (its row and its requests) per transaction, like a cell.

Tables and the ``load_points`` view are in ``load.sql`` (docs/load.md); the runner builds the rows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from infermatrix.core.store.store import Bulk, Store
from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.trace_store import trace_statements
from infermatrix.core.store.burst_store import burst_statements
from infermatrix.core.store.interference_store import interference_statements

__all__ = ["POINT_STATUSES", "POINT_COLUMNS", "POINT_REQUEST_COLUMNS", "save_point", "done_points"]

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
    statements += burst_statements(run_id, point)  # a burst's own row (burst.sql), same transaction
    statements += interference_statements(run_id, point)  # an interference point's own row (interference.sql)
    store._require_run(run_id)
    store._transaction(f"load point {point['point']} of run {run_id}", statements)


def done_points(store: Store, run_id: str, retry_errors: bool = False) -> set[int]:
    """Indexes of the points resume skips: any status but 'interrupted' (and 'error' with ``retry_errors``)."""
    final = [s for s in POINT_STATUSES if s != "interrupted" and not (retry_errors and s == "error")]
    _, found = store.query("SELECT point FROM points WHERE run_id = ? AND list_contains(?, status)", [run_id, final])
    return {int(r[0]) for r in found}
