"""Moving runs between databases as Parquet: one file per table plus a manifest.

``export_runs`` writes ``DIR/<table>.parquet`` for every table that holds run rows (runs, prefill,
cells, requests, histograms, histogram_percentiles) and ``DIR/manifest.json`` saying what is in
them. ``import_runs`` merges such a directory into a store, run by run, all in one transaction:
columns are matched by name, so an export from an older schema (fewer columns) still loads.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from infermatrix.core.store.connect import SCHEMA_VERSION
from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.store import RUN_TABLES, Store

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "MANIFEST", "ImportedRun", "export_runs", "import_runs", "read_manifest"]

EXPORT_FORMAT = "infermatrix.parquet"
EXPORT_VERSION = 1
MANIFEST = "manifest.json"
# The run columns that tell two runs with the same id apart (ids are random, 2^32 of them).
_IDENTITY = ("engine", "model", "host", "started_at", "source")
# Tables an export written by an older infermatrix may not have (added after export v1 began).
_OPTIONAL_TABLES = frozenset({"prefill_samples", "slo_limits", "run_costs", "points", "point_requests", "workload_passes", "workload_requests",
                              "trace_points", "trace_requests", "cell_host_stats", "slo_searches", "slo_search_probes",
                              "gpu_samples", "cell_interval_rows", "cell_repeats",
                              "cell_repeat_intervals", "prefill_interval_rows", "bursts", "interference_points", "task_requests",
                              "engine_samples", "gpu_series", "telemetry_costs"})  # tables newer than the first exports


@dataclass
class ImportedRun:
    """What happened to one run of an export: ``action`` is 'added', 'replaced' or 'skipped'."""

    run_id: str
    action: str
    why: str = ""


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def export_runs(store: Store, run_ids: list[str], directory: str | Path, force: bool = False) -> dict[str, Any]:
    """Write the runs (ids or unique prefixes) to ``directory`` as Parquet; returns the manifest."""
    if not run_ids:
        raise StoreError("nothing to export: no runs given")
    ids = list(dict.fromkeys(store.resolve_run(r) for r in run_ids))
    out = Path(directory).expanduser()
    if out.exists() and not out.is_dir():
        raise StoreError(f"cannot export to {out}: it is a file, not a directory")
    if (out / MANIFEST).exists() and not force:
        raise StoreError(f"{out} already holds an export (manifest.json); use another directory or --force")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {out}: {exc.strerror or exc}") from None
    counts = {}
    for table in RUN_TABLES:
        target = out / f"{table}.parquet"
        try:
            store.con.execute(
                f"COPY (SELECT * FROM {table} WHERE list_contains(?, run_id)) TO {_quote(target)} (FORMAT parquet)", [ids]
            )
        except duckdb.Error as exc:
            raise StoreError(f"cannot write {target}: {str(exc).splitlines()[0]}") from None
        counts[table] = store.query(f"SELECT count(*) FROM {table} WHERE list_contains(?, run_id)", [ids])[1][0][0]
    from infermatrix import __version__

    manifest = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "tool_version": f"infermatrix {__version__}",
        "exported_at": _now().isoformat() + "Z",
        "source_db": store.path,
        "runs": ids,
        "rows": counts,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of an export directory; a :class:`StoreError` if it isn't one."""
    d = Path(directory).expanduser()
    if not d.is_dir():
        raise StoreError(f"{d} is not a directory")
    path = d / MANIFEST
    if not path.exists():
        raise StoreError(f"{d} is not an infermatrix export (no {MANIFEST}; make one with `infermatrix export RUN --parquet DIR`)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
        raise StoreError(f"{path} is not an infermatrix export manifest")
    if int(manifest.get("version", 0)) > EXPORT_VERSION or int(manifest.get("schema_version", 0)) > SCHEMA_VERSION:
        raise StoreError(f"{d} was exported by a newer infermatrix (schema v{manifest.get('schema_version')}); upgrade infermatrix")
    missing = [t for t in RUN_TABLES if t not in _OPTIONAL_TABLES and not (d / f"{t}.parquet").exists()]
    if missing:
        raise StoreError(f"{d} is incomplete: missing {', '.join(t + '.parquet' for t in missing)}")
    return manifest


def _columns(con: duckdb.DuckDBPyConnection, source: str) -> list[str]:
    return [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]


def _same_run(store: Store, run_id: str, source: str) -> bool:
    cols = ", ".join(_IDENTITY)
    here = store.query(f"SELECT {cols} FROM runs WHERE run_id = ?", [run_id])[1]
    there = store.query(f"SELECT {cols} FROM {source} WHERE run_id = ?", [run_id])[1]
    return bool(here and there) and here[0] == there[0]


def import_runs(store: Store, directory: str | Path, replace: bool = False) -> list[ImportedRun]:
    """Merge an export into ``store``. A run already here is skipped when it is the same run
    (same engine, model, host, start), replaced with ``replace=True``, and an error otherwise."""
    d = Path(directory).expanduser()
    manifest = read_manifest(d)
    con = store._writable()
    tables = [t for t in RUN_TABLES if (d / f"{t}.parquet").exists()]
    sources = {t: f"read_parquet({_quote(d / f'{t}.parquet')})" for t in tables}
    try:
        ids = [r[0] for r in con.execute(f"SELECT run_id FROM {sources['runs']} ORDER BY run_id").fetchall()]
        shared = {t: [c for c in _columns(con, sources[t]) if c in set(_columns(con, t))] for t in tables}
    except duckdb.Error as exc:
        raise StoreError(f"cannot read the export in {d}: {str(exc).splitlines()[0]}") from None
    if sorted(ids) != sorted(manifest.get("runs", [])):
        raise StoreError(f"{d}: runs.parquet does not hold the runs its manifest lists")
    plan: list[ImportedRun] = []
    for rid in ids:
        exists = store.get_run(rid) is not None
        if not exists:
            plan.append(ImportedRun(rid, "added"))
        elif replace:
            plan.append(ImportedRun(rid, "replaced"))
        elif _same_run(store, rid, sources["runs"]):
            plan.append(ImportedRun(rid, "skipped", "already in this database"))
        else:
            raise StoreError(
                f"run {rid} in {d} is not the run {rid} already in {store.path} (different engine, model, host "
                "or start); use --replace to overwrite it"
            )
    statements: list[tuple[str, Any]] = []
    for item in plan:
        if item.action == "skipped":
            continue
        if item.action == "replaced":
            statements += [(f"DELETE FROM {t} WHERE run_id = ?", [item.run_id]) for t in RUN_TABLES]
        for t in reversed(tables):  # runs first
            cols = ", ".join(shared[t])
            statements.append((f"INSERT INTO {t} ({cols}) SELECT {cols} FROM {sources[t]} WHERE run_id = ?", [item.run_id]))
        statements.append(("UPDATE runs SET imported_at = ? WHERE run_id = ?", [_now(), item.run_id]))
    if statements:
        store._transaction(f"the runs of {d}", statements)
    return plan
