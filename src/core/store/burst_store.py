"""Burst points in the store (``burst.sql``): the statements that save a burst's ``bursts`` row in the transaction of
its ``points`` row (core/store/points.py ``save_point``); none for another kind of point."""

from __future__ import annotations

from typing import Any

__all__ = ["BURST_COLUMNS", "burst_statements"]

BURST_COLUMNS = (
    "run_id", "point", "requests", "concurrency", "natural_stop", "first_sent", "last_end", "duration_s", "tail_start", "tail_s",
    "steady_request_rate", "steady_output_tps", "ttfo_p50_ms", "ttfo_p99_ms",
)  # fmt: skip


def burst_statements(run_id: str, point: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Replace the point's burst row: a delete always (a point re-run as another kind leaves none), an insert when
    ``point["burst"]`` holds it."""
    key = [run_id, point["point"]]
    out: list[tuple[Any, Any]] = [("DELETE FROM bursts WHERE run_id = ? AND point = ?", key)]
    burst = point.get("burst")
    if burst:
        row = {**burst, "run_id": run_id, "point": point["point"]}
        out.append((f"INSERT INTO bursts ({', '.join(BURST_COLUMNS)}) VALUES ({', '.join('?' for _ in BURST_COLUMNS)})",
                    [row.get(c) for c in BURST_COLUMNS]))  # fmt: skip
    return out
