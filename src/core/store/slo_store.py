"""Attaching SLOs and a GPU-hour price to a stored run (tables slo_limits, run_costs; docs/slo.md).

The numbers themselves are SQL views (slo_views.sql): saving an SLO here is all `report --slo` needs
to judge a stored run again, without running anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from infermatrix.core.slo.spec import SloSpec
from infermatrix.core.store.store import Store

__all__ = ["save_slos", "save_gpu_hour_price", "stored_gpu_hour_price", "price_this_session"]

# The session variable run_gpus reads before the stored price (slo_views.sql): a price for one report, not stored.
SESSION_PRICE = "infermatrix_gpu_hour_usd"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def save_slos(store: Store, run_id: str, specs: Iterable[SloSpec]) -> list[str]:
    """Attach each SLO to the run (an SLO of the same name is replaced); returns their names."""
    statements: list[tuple[Any, Any]] = []
    names = []
    for spec in specs:
        names.append(spec.name)
        statements.append(("DELETE FROM slo_limits WHERE run_id = ? AND slo = ?", [run_id, spec.name]))
        for metric, p, value in spec.rows():
            statements.append(
                ("INSERT INTO slo_limits VALUES (?, ?, ?, ?, ?, ?, ?)", [run_id, spec.name, metric, p, value, spec.source, _now()])
            )
    if statements:
        store._require_run(run_id)
        store._transaction(f"the SLOs of run {run_id}", statements)
    return names


def save_gpu_hour_price(store: Store, run_id: str, usd: float) -> None:
    """The run's GPU-hour price for its cost figures (replaces one set before)."""
    store._require_run(run_id)
    store._transaction(f"the GPU-hour price of run {run_id}",
                       [("INSERT OR REPLACE INTO run_costs VALUES (?, ?, ?)", [run_id, float(usd), _now()])])  # fmt: skip


def stored_gpu_hour_price(store: Store, run_id: str) -> tuple[float | None, str | None]:
    """The price the run itself holds and where it comes from: ``(2.5, "stored")`` (run_costs), ``(2.5, "config")``
    (its config's hardware.gpu_hour_usd) or ``(None, None)`` — whatever price this session was given."""
    _, rows = store.query(
        "SELECT stored_gpu_hour_usd, CASE WHEN EXISTS (SELECT 1 FROM run_costs c WHERE c.run_id = g.run_id) THEN 'stored' "
        "WHEN stored_gpu_hour_usd IS NOT NULL THEN 'config' END FROM run_gpus g WHERE run_id = ?", [run_id])
    return (rows[0][0], rows[0][1]) if rows else (None, None)


def price_this_session(store: Store, usd: float | None) -> None:
    """Price every cost this connection reads at ``usd`` per GPU-hour, storing nothing (``None``: the stored prices
    again). A session variable, so it works on a read-only store and ends with the connection."""
    if usd is None:
        store.query(f"RESET VARIABLE {SESSION_PRICE}")
    else:
        store.query(f"SET VARIABLE {SESSION_PRICE} = ?", [float(usd)])
