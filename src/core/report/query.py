"""Reading view rows for a report: every loader (data.py, slo_report.py, openloop.py, trace_report.py,
workload_report.py, compare_data.py) asks the store through this one helper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infermatrix.core.store import Store

__all__ = ["view_rows"]


def view_rows(store: Store, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The rows of ``sql`` as dicts keyed by column name, in the query's order."""
    cols, rows = store.query(sql, list(params))
    return [dict(zip(cols, r)) for r in rows]
