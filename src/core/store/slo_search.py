"""The SLO search in the store: its answer (``slo_searches``) and every probe (``slo_search_probes``), each
probe saved in its own transaction once its point or cell is saved (tables and views: slo_search.sql)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from infermatrix.core.store.store import Store

__all__ = ["SEARCH_COLUMNS", "PROBE_COLUMNS", "save_search", "save_probe", "stored_probes", "stored_search", "retried_reason", "times_measured"]

SEARCH_COLUMNS = (
    "run_id", "slo", "over", "context_tokens", "arrival", "start", "start_source", "resolution", "max_load",
    "highest_pass", "lowest_fail", "status", "reason", "started_at", "finished_at",
)  # fmt: skip
PROBE_COLUMNS = (
    "run_id", "probe", "step", "load", "point", "context_tokens", "status", "meets", "verdict", "reason", "attainment",
    "ttft_p99_ms", "tpot_p99_ms", "output_tps", "achieved", "saved_at", "tries",
)  # fmt: skip


# A probe measured again because the client could not deliver it (search.client_retries) keeps, in its reason, what each
# earlier try said: "measured K times, client_bound before (try 1: …; try 2: …)" — written by the search, read by reports.
_RETRIED = "client_bound before"


def retried_reason(reason: str | None, earlier: list[str]) -> str | None:
    """``reason`` with the earlier tries said after it (``earlier``: each try's own reason; empty: ``reason`` as is)."""
    if not earlier:
        return reason
    tries = "; ".join(f"try {i + 1}: {why}" for i, why in enumerate(earlier))
    return "; ".join(x for x in (reason, f"measured {len(earlier) + 1} times, {_RETRIED} ({tries})") if x)


_TIMES = re.compile(r"measured (\d+) times, " + _RETRIED)


def times_measured(probe: dict[str, Any]) -> int:
    """How many times a stored probe was measured: its ``tries``, or, in a row stored before schema v13 (``tries``
    NULL), what its reason says (``retried_reason``); 1 where neither says more."""
    if probe.get("tries") is not None:
        return int(probe["tries"])
    found = _TIMES.search(probe.get("reason") or "")
    return int(found.group(1)) if found else 1


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def save_search(store: Store, run_id: str, row: dict[str, Any]) -> None:
    """Save (or replace) the run's search row; keys are column names."""
    full = {**row, "run_id": run_id}
    store._require_run(run_id)
    store._transaction(f"the SLO search of run {run_id}", [(
        f"INSERT OR REPLACE INTO slo_searches ({', '.join(SEARCH_COLUMNS)}) VALUES ({', '.join('?' for _ in SEARCH_COLUMNS)})",
        [full.get(c) for c in SEARCH_COLUMNS],
    )])  # fmt: skip


def save_probe(store: Store, run_id: str, row: dict[str, Any]) -> None:
    """Save (or replace) one probe; keys are column names."""
    full = {**row, "run_id": run_id, "saved_at": _now()}
    store._transaction(f"probe {row['probe']} of the SLO search of run {run_id}", [(
        f"INSERT OR REPLACE INTO slo_search_probes ({', '.join(PROBE_COLUMNS)}) VALUES ({', '.join('?' for _ in PROBE_COLUMNS)})",
        [full.get(c) for c in PROBE_COLUMNS],
    )])  # fmt: skip


def _dicts(store: Store, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cols, rows = store.query(sql, params)
    return [dict(zip(cols, r)) for r in rows]


def stored_probes(store: Store, run_id: str) -> dict[int, dict[str, Any]]:
    """The run's stored probes by number (resume reuses those whose load matches and whose verdict is final)."""
    return {int(r["probe"]): r for r in _dicts(store, "SELECT * FROM slo_search_probes WHERE run_id = ? ORDER BY probe", [run_id])}


def stored_search(store: Store, run_id: str) -> dict[str, Any] | None:
    found = _dicts(store, "SELECT * FROM slo_searches WHERE run_id = ?", [run_id])
    return found[0] if found else None
