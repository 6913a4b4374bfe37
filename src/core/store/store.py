"""The results store: one DuckDB file, written one finished cell (one transaction) at a time."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from infermatrix.core.contexts import format_context
from infermatrix.core.intervals import Interval
from infermatrix.core.store import repeats, rows
from infermatrix.core.store.connect import MEMORY, apply_schema, check_schema, connect, upgrade_if_older
from infermatrix.core.store.errors import QueryError, StoreError
from infermatrix.core.store.runs import (
    RUN_COLUMNS,
    RUN_JSON_COLUMNS,
    RUN_STATUSES,
    RUN_TIME_COLUMNS,
    new_run_id,
)
from infermatrix.core.types import CELL_STATUSES, CellResult, PrefillResult

__all__ = ["Store", "open_store", "DEFAULT_DB", "PREFILL_STATUSES", "FINAL_CELL_STATUSES", "RUN_TABLES"]

DEFAULT_DB = "infermatrix.duckdb"
PREFILL_STATUSES = ("valid", "client_bound", "error", "over_capacity", "interrupted")
# A cell with one of these is done: resume skips it. 'interrupted' (and 'error' on request) re-run.
FINAL_CELL_STATUSES = tuple(s for s in CELL_STATUSES if s != "interrupted")

_CELL_COLUMNS = (
    "run_id", "context_tokens", "concurrency", "status", "reason", "total_tps", "per_request_tps", "ttft_ms",
    "tbt_ms", "avg_active", "completed", "output_tokens", "measured_s", "window_start", "window_end",
    "token_source", "prompt_tokens", "started_at", "finished_at", "flags",
    "ttft_burst_ms", "ttft_burst_n", "ttft_restart_ms", "ttft_restart_n", "ran_at_most", "saved_at",
)
_PREFILL_COLUMNS = ("run_id", "context_tokens", "prompt_tokens", "ttft_ms", "prompt_tps", "status", "reason", "samples",
                    "engine_counters", "saved_at")
_PREFILL_SAMPLE_COLUMNS = ("run_id", "context_tokens", "sample_no", "throwaway", "request_id", "prompt_tokens", "ttft_ms",
                           "sent", "first_token", "outcome")  # fmt: skip
_REQUEST_COLUMNS = (
    "run_id", "context_tokens", "concurrency", "request_no", "stream_index", "seq", "sent", "first_token",
    "ended", "ttft_ms", "output_tokens", "chunks", "prompt_tokens", "finish_reason", "outcome", "error",
    "token_source", "looped", "loop_evidence", "text", "ttfo_ms", "reasoning", "reasoning_tokens",
)
_HISTOGRAM_COLUMNS = ("run_id", "context_tokens", "concurrency", "metric", "unit", "count", "encoded")
_PERCENTILE_COLUMNS = ("run_id", "context_tokens", "concurrency", "metric", "percentile", "value_ms")
_CHILD_TABLES = ("requests", "histograms", "histogram_percentiles", "cell_host_stats", "cell_interval_rows", "cell_repeats",
                 "cell_repeat_intervals")
# Every table that holds a run's rows (keyed by run_id), runs last: every store has them all (connect.SCHEMA_FILES),
# so deleting, exporting or importing a run takes its search and GPU samples too.
RUN_TABLES = ("prefill", "prefill_samples", "prefill_interval_rows", "cells", *_CHILD_TABLES, "slo_limits", "run_costs", "points", "point_requests", "workload_passes",
              "workload_requests", "task_requests", "trace_points", "trace_requests", "bursts", "interference_points", "slo_searches", "slo_search_probes", "gpu_samples",
              "engine_samples", "gpu_series", "telemetry_costs", "run_settings", "runs")


class Bulk:
    """Marker in a transaction's statement list: insert many rows (see Store._bulk_insert)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _marks(columns: Sequence[str]) -> str:
    return ", ".join("?" for _ in columns)


class Store:
    """A DuckDB results database. Thread-safe (one lock); not shareable across processes for writing.

    ``Store(path)`` creates the file and schema if needed; ``read_only=True`` needs an existing store
    and creates nothing. Every failure is a :class:`StoreError` with a one-line message.
    """

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_DB, read_only: bool = False):
        self.read_only = read_only
        # Whether this open made the file: a run that never started removes it again (close_unused).
        self.created = str(path) != MEMORY and not read_only and not Path(path).expanduser().exists()
        con, self.path = connect(path, read_only)
        self._lock = threading.RLock()
        self._types: dict[str, dict[str, str]] = {}
        try:
            if read_only:
                con = upgrade_if_older(con, self.path)
                check_schema(con, self.path)
            else:
                apply_schema(con, self.path)
        except BaseException:
            con.close()
            raise
        self._con: duckdb.DuckDBPyConnection | None = con

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r}{', read_only=True' if self.read_only else ''})"

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"database {self.path} is closed")
        return self._con

    def _writable(self) -> duckdb.DuckDBPyConnection:
        if self.read_only:
            raise StoreError(f"database {self.path} is open read-only")
        return self.con

    def _transaction(self, what: str, statements: Sequence[tuple[str, Any]]) -> None:
        """Run statements atomically: ``(sql, params)``, or ``(Bulk, (table, columns, rows))``."""
        con = self._writable()
        with self._lock:
            con.execute("BEGIN TRANSACTION")
            try:
                for sql, params in statements:
                    if sql is Bulk:
                        self._bulk_insert(*params)
                    else:
                        con.execute(sql, params)
                con.execute("COMMIT")
            except BaseException as exc:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT has already ended the transaction; keep the original error
                if isinstance(exc, (duckdb.Error, ValueError, TypeError)):
                    raise StoreError(f"could not save {what} in {self.path}: {_one_line(exc)}") from exc
                raise

    def _bulk_insert(self, table: str, columns: Sequence[str], data: list[list[Any]]) -> None:
        """Insert many rows with one statement: one typed list per column, zipped by unnest().

        executemany runs one INSERT per row (about 1 ms each); a 128-stream cell has thousands of
        requests, and the runner waits on this between cells.
        """
        if not data:
            return
        types = self._column_types(table)
        lists = [list(col) for col in zip(*data)]
        select = ", ".join(f"unnest(?::{types[c]}[])" for c in columns)
        self.con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select}", lists)

    def _column_types(self, table: str) -> dict[str, str]:
        if table not in self._types:
            found = self.con.execute(f"DESCRIBE {table}").fetchall()
            self._types[table] = {name: typ for name, typ, *_ in found}
        return self._types[table]

    # ---- runs ------------------------------------------------------------------------------

    def create_run(self, info: dict[str, Any]) -> str:
        """Insert a run; returns its id (generated unless ``info['run_id']`` is given).

        Keys are runs columns (see ``runs.RUN_COLUMNS``); JSON columns take dicts (or pydantic
        models), times take datetimes or epoch seconds. Status defaults to 'running', started_at to now.
        """
        values = self._run_values(info)
        values.setdefault("status", "running")
        values.setdefault("started_at", _now())
        if "run_id" not in values or not values["run_id"]:
            values["run_id"] = self._unused_run_id()
        self._check_run_status(values["status"])
        cols = list(values)
        sql = f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        try:
            self._transaction(f"run {values['run_id']}", [(sql, [values[c] for c in cols])])
        except StoreError as exc:
            if isinstance(exc.__cause__, duckdb.ConstraintException):
                raise StoreError(f"run {values['run_id']} already exists in {self.path}") from None
            raise
        return values["run_id"]

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set some columns of a run (same conventions as :meth:`create_run`)."""
        if not fields:
            return
        values = self._run_values(fields)
        if "run_id" in values:
            raise StoreError("update_run cannot change a run's id")
        if "status" in values:
            self._check_run_status(values["status"])
        self._require_run(run_id)
        sets = ", ".join(f"{c} = ?" for c in values)
        self._transaction(f"run {run_id}", [(f"UPDATE runs SET {sets} WHERE run_id = ?", [*values.values(), run_id])])

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        """Mark a run completed / interrupted / failed, with finished_at = now (and why it failed)."""
        fields: dict[str, Any] = {"status": status, "finished_at": _now()}
        if error is not None:
            fields["error"] = error
        self.update_run(run_id, **fields)

    def close_unused(self) -> None:
        """Close; and when this open created the database and no run was stored in it (the run never started: an
        unreachable URL, a refused config, Ctrl-C before the run existed), remove the file, its WAL and its empty
        ``<db>.runs`` directory, so nothing is left behind that only looks like a result."""
        empty = False
        if self.created and self._con is not None:
            try:
                empty = self.query("SELECT count(*) FROM runs")[1][0][0] == 0
            except StoreError:
                empty = False
        self.close()
        if not empty:
            return
        p = Path(self.path)
        for leftover in (p, p.with_name(p.name + ".wal")):
            leftover.unlink(missing_ok=True)
        try:
            p.with_name(p.stem + ".runs").rmdir()  # only if empty: a run directory in it is kept
        except OSError:
            pass

    def delete_run(self, run_id: str) -> None:
        """Remove a run and all its rows (prefill, cells, requests, histograms), in one transaction."""
        self._require_run(run_id)
        self._transaction(f"deletion of run {run_id}", [(f"DELETE FROM {t} WHERE run_id = ?", [run_id]) for t in RUN_TABLES])

    def run_dir(self, run_id: str) -> Path:
        """A directory for the run's files (engine log ...), next to the database:
        ``results.duckdb`` -> ``results.runs/<run_id>/``. Created if missing."""
        if self.path == MEMORY:
            base = Path(tempfile.gettempdir()) / "infermatrix-runs"
        else:
            p = Path(self.path)
            base = p.with_name(p.stem + ".runs")
        d = base / run_id
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create run directory {d}: {exc.strerror or exc}") from None
        return d

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run's row as a dict (JSON columns parsed), or ``None``."""
        cols, found = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if not found:
            return None
        run = dict(zip(cols, found[0]))
        for c in RUN_JSON_COLUMNS:
            if isinstance(run.get(c), str):
                run[c] = json.loads(run[c])
        return run

    def latest_run_id(self) -> str | None:
        """The most recently started run."""
        _, found = self.query("SELECT run_id FROM runs ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT 1")
        return found[0][0] if found else None

    def resolve_run(self, prefix: str | None) -> str:
        """The run id for a unique prefix (or the exact id); the latest run for ``None``."""
        if prefix is None or prefix == "":
            latest = self.latest_run_id()
            if latest is None:
                raise StoreError(f"no runs in {self.path} yet")
            return latest
        _, found = self.query(
            "SELECT run_id FROM runs WHERE starts_with(run_id, ?) ORDER BY started_at DESC NULLS LAST, run_id",
            [prefix],
        )
        ids = [r[0] for r in found]
        if prefix in ids:
            return prefix
        if not ids:
            raise StoreError(f"no run matches {prefix!r} in {self.path}")
        if len(ids) > 1:
            shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            raise StoreError(f"run id {prefix!r} is ambiguous in {self.path}: {shown}")
        return ids[0]

    def list_runs(self) -> list[dict[str, Any]]:
        """One dict per run from the run_summary view, newest first."""
        cols, found = self.query("SELECT * FROM run_summary")
        return [dict(zip(cols, r)) for r in found]

    def _run_values(self, info: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(info) - set(RUN_COLUMNS))
        if unknown:
            raise StoreError(f"unknown run field(s): {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for key in RUN_COLUMNS:  # table order, so SQL reads naturally
            if key not in info:
                continue
            v = info[key]
            try:
                if key in RUN_JSON_COLUMNS or (key == "notes" and v is not None and not isinstance(v, str)):
                    v = rows.to_json(v)
                elif key in RUN_TIME_COLUMNS:
                    v = rows.to_timestamp(v)
            except (TypeError, ValueError) as exc:
                raise StoreError(f"run field {key}: {exc}") from None
            values[key] = v
        return values

    def _unused_run_id(self) -> str:
        for _ in range(100):
            rid = new_run_id()
            if self.con.execute("SELECT 1 FROM runs WHERE run_id = ?", [rid]).fetchone() is None:
                return rid
        raise StoreError("could not find an unused run id")  # 2^32 ids: only if something is very wrong

    @staticmethod
    def _check_run_status(status: str) -> None:
        if status not in RUN_STATUSES:
            raise StoreError(f"unknown run status {status!r} (expected one of {', '.join(RUN_STATUSES)})")

    def _require_run(self, run_id: str) -> None:
        if self.con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")

    # ---- results ---------------------------------------------------------------------------

    def save_prefill(self, run_id: str, r: PrefillResult) -> None:
        """Save (or replace) one prefill probe."""
        statements = self._prefill_statements(run_id, r)
        self._require_run(run_id)
        self._transaction(f"prefill {format_context(r.context_tokens)} of run {run_id}", statements)

    def save_cell(self, run_id: str, c: CellResult) -> None:
        """Save one finished cell: its row, its requests and its histograms, in ONE transaction.

        Saving a cell again replaces it entirely (resume / retry). On any error nothing of the new
        version is kept and an earlier saved version stays as it was.
        """
        statements = self._cell_statements(run_id, c)
        self._require_run(run_id)
        self._transaction(f"cell {format_context(c.context_tokens)} x {c.concurrency} of run {run_id}", statements)

    def save_results(self, run_id: str, prefill: Sequence[PrefillResult] = (), cells: Sequence[CellResult] = ()) -> None:
        """Save many prefill probes and cells in ONE transaction (all or nothing): what an import
        of a whole published matrix needs. Same rules as :meth:`save_prefill` / :meth:`save_cell`."""
        statements: list[tuple[Any, Any]] = []
        for r in prefill:
            statements += self._prefill_statements(run_id, r)
        for c in cells:
            statements += self._cell_statements(run_id, c)
        self._require_run(run_id)
        self._transaction(f"{len(prefill)} prefill points and {len(cells)} cells of run {run_id}", statements)

    @staticmethod
    def _prefill_statements(run_id: str, r: PrefillResult) -> list[tuple[Any, Any]]:
        if r.status not in PREFILL_STATUSES:
            raise StoreError(f"unknown prefill status {r.status!r} (expected one of {', '.join(PREFILL_STATUSES)})")
        key = [run_id, r.context_tokens]
        return [
            (f"INSERT OR REPLACE INTO prefill ({', '.join(_PREFILL_COLUMNS)}) VALUES ({_marks(_PREFILL_COLUMNS)})",
             [*rows.prefill_row(run_id, r), _now()]),
            ("DELETE FROM prefill_samples WHERE run_id = ? AND context_tokens = ?", key),
            (Bulk, ("prefill_samples", _PREFILL_SAMPLE_COLUMNS, rows.prefill_sample_rows(run_id, r))),
            ("DELETE FROM prefill_interval_rows WHERE run_id = ? AND context_tokens = ?", key),
            (Bulk, ("prefill_interval_rows", rows.PREFILL_INTERVAL_COLUMNS, rows.prefill_interval_rows(run_id, r))),
        ]  # fmt: skip

    @staticmethod
    def _cell_statements(run_id: str, c: CellResult, keep: tuple[str, ...] = ()) -> list[tuple[Any, Any]]:
        """The statements that replace a cell's rows; ``keep``: child tables left as they are (a repeat's save)."""
        what = f"cell {format_context(c.context_tokens)} x {c.concurrency} of run {run_id}"
        if c.status not in CELL_STATUSES:
            raise StoreError(f"{what}: unknown status {c.status!r} (expected one of {', '.join(CELL_STATUSES)})")
        try:
            cell = rows.cell_row(run_id, c) + [_now()]
            requests = rows.request_rows(run_id, c)
            hists, pcts = rows.histogram_rows(run_id, c)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"could not save {what}: {_one_line(exc)}") from None
        key = [run_id, c.context_tokens, c.concurrency]
        where = "WHERE run_id = ? AND context_tokens = ? AND concurrency = ?"
        statements: list[tuple[Any, Any]] = [(f"DELETE FROM {t} {where}", key) for t in _CHILD_TABLES if t not in keep]
        statements.append((f"INSERT OR REPLACE INTO cells ({', '.join(_CELL_COLUMNS)}) VALUES ({_marks(_CELL_COLUMNS)})", cell))
        if "requests" not in keep:
            statements.append((Bulk, ("requests", _REQUEST_COLUMNS, requests)))
        statements.append((Bulk, ("histograms", _HISTOGRAM_COLUMNS, hists)))
        statements.append((Bulk, ("histogram_percentiles", _PERCENTILE_COLUMNS, pcts)))
        statements.append((Bulk, ("cell_host_stats", rows.HOST_COLUMNS, rows.host_rows(run_id, c))))
        if not keep:  # a repeat's save writes the cell's intervals across its repeats itself
            statements.append((Bulk, ("cell_interval_rows", rows.INTERVAL_COLUMNS, rows.interval_rows(run_id, c))))
        return statements

    def save_repeat(self, run_id: str, c: CellResult, repeat: int, of: int) -> CellResult:
        """Save repeat ``repeat`` (1 … ``of``) of a cell measured ``of`` > 1 times: its own rows (cell_repeats,
        cell_repeat_intervals, its requests), and the cell across every stored repeat (store/repeats.py) as the cell's
        row, histograms and intervals, in ONE transaction. Saving a repeat again replaces that repeat. Returns the cell
        across its repeats."""
        what = f"cell {format_context(c.context_tokens)} x {c.concurrency} of run {run_id}, repeat {repeat}"
        if c.status not in CELL_STATUSES:
            raise StoreError(f"{what}: unknown status {c.status!r} (expected one of {', '.join(CELL_STATUSES)})")
        self._require_run(run_id)
        key = [run_id, c.context_tokens, c.concurrency]
        try:
            new, row = repeats.repeat_of(run_id, c, repeat)
            every = [r for r in self._stored_repeats(key) if r.repeat != repeat] + [new]
            combined, ivs = repeats.combine(every, of)
            statements = self._cell_statements(run_id, combined, keep=("requests", "cell_repeats", "cell_repeat_intervals"))
            requests = [[*q[:3], (repeat - 1) * repeats.REQUEST_STRIDE + q[3], *q[4:], repeat] for q in rows.request_rows(run_id, c)]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"could not save {what}: {_one_line(exc)}") from None
        where = "WHERE run_id = ? AND context_tokens = ? AND concurrency = ? AND repeat = ?"
        statements += [(f"DELETE FROM {t} {where}", [*key, repeat]) for t in ("requests", "cell_repeats", "cell_repeat_intervals")]
        # a whole-cell save before (measured once: an interrupted cell, a run that had matrix.repeat = 1) goes
        statements.append(("DELETE FROM requests WHERE run_id = ? AND context_tokens = ? AND concurrency = ? AND repeat IS NULL", key))
        statements += [
            (f"INSERT INTO cell_repeats ({', '.join(repeats.REPEAT_COLUMNS)}, saved_at) VALUES ({_marks(repeats.REPEAT_COLUMNS)}, ?)", [*row, _now()]),
            (Bulk, ("cell_repeat_intervals", repeats.REPEAT_INTERVAL_COLUMNS,
                    [[*key, repeat, m, iv.value, iv.lo, iv.hi, iv.method, iv.n] for m, iv in sorted(new.intervals.items())])),
            (Bulk, ("requests", (*_REQUEST_COLUMNS, "repeat"), requests)),
            (Bulk, ("cell_interval_rows", repeats.COMBINED_INTERVAL_COLUMNS, [[*key, *iv] for iv in ivs])),
        ]  # fmt: skip
        self._transaction(what, statements)
        return combined

    def _stored_repeats(self, key: list[Any]) -> list[repeats.Repeat]:
        where = "WHERE run_id = ? AND context_tokens = ? AND concurrency = ?"
        cols, found = self.query(f"SELECT {', '.join(repeats.REPEAT_COLUMNS)} FROM cell_repeats {where} ORDER BY repeat", key)
        out = []
        for r in found:
            values = dict(zip(cols, r))
            values["flags"] = json.loads(values["flags"]) if values["flags"] else {}
            values["histograms"] = json.loads(values["histograms"]) if values["histograms"] else {}
            out.append(repeats.Repeat(values["repeat"], values))
        _, ivs = self.query(f"SELECT repeat, metric, value, lo, hi, method, n FROM cell_repeat_intervals {where}", key)
        by_repeat = {r.repeat: r for r in out}
        for rep, metric, value, lo, hi, method, n in ivs:
            if rep in by_repeat:
                by_repeat[rep].intervals[metric] = Interval(value, lo, hi, method, n)
        return out

    def done_repeats(self, run_id: str, retry_errors: bool = False) -> dict[tuple[int, int], set[int]]:
        """For every cell with stored repeats (matrix.repeat > 1): the repeats resume skips (any final status, as
        :meth:`done_cells`). A cell missing here was measured once, or not yet."""
        final = [s for s in FINAL_CELL_STATUSES if not (retry_errors and s == "error")]
        _, found = self.query("SELECT context_tokens, concurrency, repeat, list_contains(?, status) FROM cell_repeats WHERE run_id = ?",
                              [final, run_id])  # fmt: skip
        out: dict[tuple[int, int], set[int]] = {}
        for ctx, n, rep, done in found:
            out.setdefault((int(ctx), int(n)), set()).update([int(rep)] if done else [])
        return out

    def done_cells(self, run_id: str, retry_errors: bool = False) -> set[tuple[int, int]]:
        """``(context_tokens, concurrency)`` of the cells resume should skip: any final status
        (everything but 'interrupted'; also not 'error' when ``retry_errors``)."""
        final = [s for s in FINAL_CELL_STATUSES if not (retry_errors and s == "error")]
        _, found = self.query(
            "SELECT context_tokens, concurrency FROM cells WHERE run_id = ? AND list_contains(?, status)",
            [run_id, final],
        )
        return {(int(a), int(b)) for a, b in found}

    def done_prefill(self, run_id: str) -> set[int]:
        """Context lengths whose prefill probe has a final status (not 'interrupted')."""
        _, found = self.query("SELECT context_tokens FROM prefill WHERE run_id = ? AND status <> 'interrupted'", [run_id])
        return {int(r[0]) for r in found}

    # ---- reading ---------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> tuple[list[str], list[tuple]]:
        """Run any SQL; returns ``(column names, rows)`` (both empty for statements without a result)."""
        con = self.con
        with self._lock:
            try:
                cur = con.execute(sql, params) if params is not None else con.execute(sql)
                if cur.description is None:
                    return [], []
                return [d[0] for d in cur.description], cur.fetchall()
            except duckdb.Error as exc:
                raise QueryError(_one_line(exc)) from exc


def _one_line(exc: BaseException) -> str:
    # DuckDB appends the query with a caret marker on later lines; the first line says what went wrong.
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def open_store(path: str | os.PathLike[str] | None = None, read_only: bool = False) -> Store:
    """``Store(path or ./infermatrix.duckdb)``."""
    return Store(DEFAULT_DB if path is None else path, read_only=read_only)

