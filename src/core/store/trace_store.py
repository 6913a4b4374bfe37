"""Trace-replay points in the store (``trace.sql``): the statements that save a trace point's own rows in the
transaction of its ``points`` row (core/store/points.py ``save_point``); none for a rate point."""

from __future__ import annotations

from typing import Any

from infermatrix.core.store.store import Bulk

__all__ = ["TRACE_POINT_COLUMNS", "TRACE_REQUEST_COLUMNS", "trace_statements"]

TRACE_POINT_COLUMNS = (
    "run_id", "point", "path", "format", "sha256", "time_scale", "block_tokens", "in_file", "replayed", "skipped_failed",
    "skipped_empty", "skipped_too_long", "cut", "span_s", "trace_rate", "prompt_overhead", "inexact_prompts", "shared_prefix_tokens", "prompt_tokens",
)  # fmt: skip
TRACE_REQUEST_COLUMNS = (
    "run_id", "point", "request_no", "trace_index", "trace_at_s", "offset_s", "trace_input_tokens", "trace_output_tokens",
    "hash_ids", "built_prompt_tokens", "shared_prefix_tokens",
)  # fmt: skip


def trace_statements(run_id: str, point: dict[str, Any], requests: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """Replace the point's trace rows: deletes always (a point re-run as another kind leaves none), inserts
    when ``point["trace"]`` holds the trace point's row."""
    key = [run_id, point["point"]]
    out: list[tuple[Any, Any]] = [
        ("DELETE FROM trace_requests WHERE run_id = ? AND point = ?", key),
        ("DELETE FROM trace_points WHERE run_id = ? AND point = ?", key),
    ]
    trace = point.get("trace")
    if not trace:
        return out
    row = {**trace, "run_id": run_id, "point": point["point"]}
    reqs = [[key[0] if c == "run_id" else key[1] if c == "point" else r.get(c) for c in TRACE_REQUEST_COLUMNS] for r in requests]
    out += [
        (f"INSERT INTO trace_points ({', '.join(TRACE_POINT_COLUMNS)}) VALUES ({', '.join('?' for _ in TRACE_POINT_COLUMNS)})",
         [row.get(c) for c in TRACE_POINT_COLUMNS]),
        (Bulk, ("trace_requests", TRACE_REQUEST_COLUMNS, reqs)),
    ]  # fmt: skip
    return out
