"""A sweep's report (``infermatrix report --sweep SWEEP_ID``; docs/tuning.md, "The report"), read from the sweep views
only: sweep_runs (each combination, its setting and status), sweep_frontier (the frontier across every setting),
best_setting (the winner per SLO and context, its margin) and sweep_setting_scores, with what each run's engine reported
(runs, run_gpus) and the cells the "why" lines cite (decode_matrix, slo_cells).

The "why" of a losing setting is one implementation, :func:`why_rows`: per SLO and context, for each setting that is not
the goodput winner, where it went over capacity (its first over_capacity cell), where it lost the SLO (its first cell that
does not meet it) and how much less SLO goodput per GPU it made at its best (best_setting's own figure, from
sweep_setting_scores).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.report.query import view_rows
from infermatrix.core.store import Store, StoreError
from infermatrix.core.store.sweep_store import resolve_sweep

__all__ = ["SweepReport", "load_sweep_report", "resolve_sweep_arg", "why_rows", "engine_reported"]


@dataclass
class SweepReport:
    """The rows of the sweep views for one sweep, in report order."""

    sweep: dict[str, Any]
    settings: list[dict[str, Any]] = field(default_factory=list)  # sweep_runs rows + the run's engine, reports and GPUs
    frontier: list[dict[str, Any]] = field(default_factory=list)  # sweep_frontier rows
    best: list[dict[str, Any]] = field(default_factory=list)  # best_setting rows
    scores: list[dict[str, Any]] = field(default_factory=list)  # sweep_setting_scores rows (goodput)
    cells: list[dict[str, Any]] = field(default_factory=list)  # decode_matrix rows of the sweep's runs (status only)
    slo_cells: list[dict[str, Any]] = field(default_factory=list)  # slo_cells rows (meets) of the sweep's runs
    why: list[dict[str, Any]] = field(default_factory=list)  # why_rows()

    @property
    def sweep_id(self) -> str:
        return str(self.sweep["sweep_id"])

    @property
    def contexts(self) -> dict[int, str]:
        """context tokens -> label, of every decode cell the sweep's runs have, in order."""
        return dict(sorted({c["context_tokens"]: c["context_label"] for c in self.cells}.items()))

    @property
    def unknown_gpus(self) -> list[dict[str, Any]]:
        """The settings whose run ran but whose GPU count is unknown."""
        return [s for s in self.settings if s.get("engine") is not None and s.get("gpus") is None]


def resolve_sweep_arg(store: Store, arg: str) -> str:
    """The sweep id ``arg`` names (an id, a unique prefix, or ``latest``); StoreError with the one line to say otherwise."""
    if arg == "latest":
        _, rows = store.query("SELECT sweep_id FROM sweeps ORDER BY created_at DESC, sweep_id LIMIT 1")
        if not rows:
            raise StoreError(f"no sweep in {store.path} yet (infermatrix sweep CONFIG --grid KEY=V1,V2 makes one)")
        return str(rows[0][0])
    found = resolve_sweep(store, arg)
    if found is not None:
        return found[0]
    _, runs = store.query("SELECT run_id FROM runs WHERE starts_with(run_id, ?) LIMIT 1", [arg])
    if runs:
        raise StoreError(f"{arg!r} is a run, not a sweep: infermatrix report {runs[0][0]} (a sweep's id starts with 's')")
    raise StoreError(f"no sweep {arg!r} in {store.path} (SELECT sweep_id, name FROM sweeps lists them)")


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


def _find(extra: Any, leaf: str) -> tuple[bool, Any]:
    """The first value stored under ``leaf`` in the engine's description, top level first, then nested tables."""
    if not isinstance(extra, dict):
        return False, None
    if leaf in extra and extra[leaf] is not None:
        return True, extra[leaf]
    for v in extra.values():
        hit, found = _find(v, leaf)
        if hit:
            return hit, found
    return False, None


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def engine_reported(extra: dict[str, Any] | None, setting: dict[str, str]) -> list[tuple[str, str, str | None]]:
    """Per grid key, what the engine itself reported for it: ``(name, value it reported, value asked where they differ)``;
    the name is the key's last part (``engine.args.max_num_seqs`` -> ``max_num_seqs``), looked up in what the engine
    described (EngineInfo.extra: a launched engine's flags, what its server reports). Keys it says nothing about are left out."""
    out = []
    for key, asked in setting.items():
        leaf = key.rsplit(".", 1)[-1]
        hit, value = _find(extra, leaf)
        if hit:
            said = _text(value)
            out.append((leaf, said, None if said == asked else asked))
    return out


def _settings(store: Store, sweep_id: str) -> list[dict[str, Any]]:
    rows = view_rows(store, "SELECT s.*, r.engine, r.engine_version, r.engine_extra, r.max_seqs, r.kv_tokens, r.capacity_source, "
                     "g.gpus, g.gpus_source FROM sweep_runs s LEFT JOIN runs r ON r.run_id = s.run_id "
                     "LEFT JOIN run_gpus g ON g.run_id = s.run_id WHERE s.sweep_id = ? ORDER BY s.k", [sweep_id])  # fmt: skip
    keys = view_rows(store, "SELECT s.run_id, s.key, s.value FROM run_settings s JOIN sweep_members m ON m.run_id = s.run_id "
                     "WHERE m.sweep_id = ? ORDER BY s.position, s.key", [sweep_id])  # fmt: skip
    for row in rows:
        extra = _json(row.pop("engine_extra")) or {}
        row["startup_s"] = extra.get("startup_s")
        row["attached"] = extra.get("attached")
        row["setting_keys"] = {k["key"]: k["value"] for k in keys if k["run_id"] == row["run_id"]}
        row["reported"] = [{"name": n, "value": v, "asked": a} for n, v, a in engine_reported(extra, row["setting_keys"])]
    return rows


def load_sweep_report(store: Store, sweep_id: str) -> SweepReport:
    """Every row the sweep report shows, for ``sweep_id`` (already resolved: :func:`resolve_sweep_arg`)."""
    (sweep,) = view_rows(store, "SELECT sweep_id, name, created_at, spec FROM sweeps WHERE sweep_id = ?", [sweep_id])
    sweep["spec"] = _json(sweep["spec"])
    members = "(SELECT run_id FROM sweep_members WHERE sweep_id = ?)"
    r = SweepReport(
        sweep=sweep,
        settings=_settings(store, sweep_id),
        frontier=view_rows(store, "SELECT * FROM sweep_frontier WHERE sweep_id = ? ORDER BY context_tokens, setting, concurrency", [sweep_id]),
        best=view_rows(store, "SELECT * FROM best_setting WHERE sweep_id = ? ORDER BY slo, context_tokens, objective", [sweep_id]),
        scores=view_rows(store, "SELECT * FROM sweep_setting_scores WHERE sweep_id = ? AND objective = 'goodput'", [sweep_id]),
        cells=view_rows(store, f"SELECT run_id, context_label, context_tokens, concurrency, status FROM decode_matrix "
                        f"WHERE run_id IN {members} ORDER BY run_id, context_tokens, concurrency", [sweep_id]),
        slo_cells=view_rows(store, f"SELECT run_id, slo, context_tokens, concurrency, meets FROM slo_cells WHERE run_id IN {members} "
                            "ORDER BY run_id, slo, context_tokens, concurrency", [sweep_id]),
    )  # fmt: skip
    order = {s["run_id"]: s["k"] for s in r.settings}  # the grid's order, not the setting string's (2 before 16)
    r.frontier.sort(key=lambda f: (f["context_tokens"], order.get(f["run_id"], 0), f["concurrency"]))
    r.why = why_rows(r)
    return r


def _first(rows: list[dict[str, Any]]) -> int | None:
    return min((c["concurrency"] for c in rows), default=None)


# A cell the setting could not hold: not run (over_capacity: past the capacity the engine reported) or run but never
# holding its load at once (admission_limited: the engine's batch cap or KV cache held the rest back).
HELD_BACK = ("over_capacity", "admission_limited")


def _over_capacity(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """``over_capacity_at``: the first load the setting could not hold, and ``over_capacity_status``: how it showed."""
    held = sorted((c for c in cells if c["status"] in HELD_BACK), key=lambda c: c["concurrency"])
    return {"over_capacity_at": held[0]["concurrency"] if held else None, "over_capacity_status": held[0]["status"] if held else None}


def why_rows(r: SweepReport) -> list[dict[str, Any]]:
    """Per SLO and context the goodput winner was chosen in, one row per other setting whose run ran: ``over_capacity_at``
    (its first cell there it could not hold: over_capacity or admission_limited, ``over_capacity_status`` says which),
    ``slo_lost_at`` (its first valid cell there that does not meet the SLO), ``judged_cells`` (its valid cells there the SLO could judge: some request ended in the window), ``value`` (its SLO
    goodput per GPU at its best cell meeting it, None when none does), ``best_value`` and ``shortfall``
    (1 − value ÷ best_value), and ``per`` (GPU, or server where a GPU count is unknown)."""
    out = []
    ran = [s for s in r.settings if s["status"] in ("completed", "stopped")]
    for b in (b for b in r.best if b["objective"] == "goodput"):
        ctx, slo = b["context_tokens"], b["slo"]
        for s in (s for s in ran if s["run_id"] != b["run_id"]):
            rid = s["run_id"]
            score = next((x for x in r.scores if x["run_id"] == rid and x["slo"] == slo and x["context_tokens"] == ctx), None)
            value = None if score is None else score["value"]
            judged = [c for c in r.slo_cells if c["run_id"] == rid and c["slo"] == slo and c["context_tokens"] == ctx and c["meets"] is not None]
            out.append({
                "slo": slo, "context_label": b["context_label"], "context_tokens": ctx, "run_id": rid, "setting": s["setting"],
                **_over_capacity([c for c in r.cells if c["run_id"] == rid and c["context_tokens"] == ctx]),
                "slo_lost_at": _first([c for c in judged if c["meets"] is False]), "judged_cells": len(judged),
                "value": value, "best_value": b["value"], "best_setting": b["setting"],
                "shortfall": None if value is None or not b["value"] else 1 - value / b["value"],
                "per": "server" if b.get("gpus_note") else "GPU",
            })  # fmt: skip
    return out
