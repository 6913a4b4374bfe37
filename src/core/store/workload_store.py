"""A workload's own pass in the store (shared-prefix, multi-turn): its row and its requests in one transaction.

Tables and the ``prefix_reuse``, ``turns`` and ``ttft_by_cached_fraction`` views are in ``workload.sql``
(docs/workloads.md); the runner builds the rows (core/run/sessions.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.store import Bulk, Store

__all__ = ["PASS_STATUSES", "PASS_COLUMNS", "PASS_REQUEST_COLUMNS", "TASK_COLUMNS", "save_workload_pass", "pass_done"]

PASS_STATUSES = ("valid", "error", "interrupted")
PASS_COLUMNS = (
    "run_id", "workload", "params", "block_tokens", "block_source", "sessions", "concurrency", "requests", "failed",
    "prompt_tokens", "expected_cached_tokens", "implied_reuse", "engine_queries", "engine_hits", "engine_hit_rate",
    "engine_note", "span_start", "span_end", "status", "reason", "started_at", "finished_at",
)  # fmt: skip
PASS_REQUEST_COLUMNS = (
    "run_id", "request_no", "session", "grp", "member", "conversation", "turn", "request_id", "sent", "first_token",
    "ended", "ttft_ms", "e2e_ms", "prompt_tokens", "shared_tokens", "expected_cached_tokens", "expected_cached_fraction",
    "output_tokens", "outcome", "error", "reply", "messages",
)  # fmt: skip
TASK_COLUMNS = (
    "run_id", "request_no", "task_set", "task_id", "task_kind", "expected", "regex", "extracted", "correct",
    "reasoning_tokens", "finish_reason",
)  # fmt: skip  (tasks.sql: a request row that carries a task_id also gets one)


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def save_workload_pass(store: Store, run_id: str, row: dict[str, Any], requests: list[dict[str, Any]]) -> None:
    """Save (or replace) the run's pass and its requests in ONE transaction; keys are column names."""
    if row.get("status") not in PASS_STATUSES:
        raise StoreError(f"workload pass: unknown status {row.get('status')!r} (expected one of {', '.join(PASS_STATUSES)})")
    values = {**row, "run_id": run_id, "params": _json(row.get("params"))}
    reqs = [[run_id if c == "run_id" else _json(r.get(c)) if c == "messages" else r.get(c) for c in PASS_REQUEST_COLUMNS]
            for r in requests]  # fmt: skip
    tasks = [[run_id if c == "run_id" else r.get(c) for c in TASK_COLUMNS] for r in requests if r.get("task_id") is not None]
    statements: list[tuple[Any, Any]] = [
        ("DELETE FROM task_requests WHERE run_id = ?", [run_id]),
        ("DELETE FROM workload_requests WHERE run_id = ?", [run_id]),
        (f"INSERT OR REPLACE INTO workload_passes ({', '.join(PASS_COLUMNS)}) VALUES ({', '.join('?' for _ in PASS_COLUMNS)})",
         [values.get(c) for c in PASS_COLUMNS]),
        (Bulk, ("workload_requests", PASS_REQUEST_COLUMNS, reqs)),
        (Bulk, ("task_requests", TASK_COLUMNS, tasks)),
    ]  # fmt: skip
    store._require_run(run_id)
    store._transaction(f"workload pass of run {run_id}", statements)


def pass_done(store: Store, run_id: str, retry_errors: bool = False) -> bool:
    """Whether resume skips the pass: saved with any status but 'interrupted' (and 'error' with ``retry_errors``)."""
    final = [s for s in PASS_STATUSES if s != "interrupted" and not (retry_errors and s == "error")]
    _, found = store.query("SELECT count(*) FROM workload_passes WHERE run_id = ? AND list_contains(?, status)", [run_id, final])
    return bool(found and found[0][0])
