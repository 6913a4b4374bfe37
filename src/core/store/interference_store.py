"""Interference points in the store (``interference.sql``): the statements that save a point's ``interference_points``
row in the transaction of its ``points`` row (core/store/points.py ``save_point``); none for another kind of point."""

from __future__ import annotations

from typing import Any

__all__ = ["INTERFERENCE_COLUMNS", "interference_statements"]

INTERFERENCE_COLUMNS = (
    "run_id", "point", "decode_streams", "decode_context", "prefills", "prefill_rate", "warmup_s", "window_s", "window_start",
    "window_end", "tbt_alone_ms", "tbt_alone_p99_ms", "alone_gaps", "tbt_during_ms", "tbt_p99_during_ms", "stall_max_ms",
    "during_gaps", "prefill_ttft_ms", "prefill_ttft_max_ms", "prefill_ttft_alone_ms",
)  # fmt: skip


def interference_statements(run_id: str, point: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Replace the point's interference row: a delete always (a point re-run as another kind leaves none), an insert
    when ``point["mixed"]`` holds it."""
    key = [run_id, point["point"]]
    out: list[tuple[Any, Any]] = [("DELETE FROM interference_points WHERE run_id = ? AND point = ?", key)]
    mixed = point.get("mixed")
    if mixed:
        row = {**mixed, "run_id": run_id, "point": point["point"]}
        out.append((f"INSERT INTO interference_points ({', '.join(INTERFERENCE_COLUMNS)}) VALUES ({', '.join('?' for _ in INTERFERENCE_COLUMNS)})",
                    [row.get(c) for c in INTERFERENCE_COLUMNS]))  # fmt: skip
    return out
