"""Opening the DuckDB file: clear one-line errors, and the schema applied idempotently."""

from __future__ import annotations

import datetime as dt
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from infermatrix.core.store.errors import StoreError

__all__ = ["SCHEMA_VERSION", "SCHEMA_FILES", "MEMORY", "connect", "apply_schema", "check_schema", "stored_version", "upgrade_if_older"]

# Bump when any file of SCHEMA_FILES changes (views are part of the contract, so of the version): a store at an
# older version is upgraded at its next open, read-only opens included (upgrade_if_older).
# v2: runs.source and runs.imported_at (imported published results, Parquet merges).
# v3: prefill_samples, cells' TTFT populations and ran_at_most, runs.client_overhead_ms, the
#     admission_limited status, decode_matrix / prefill_list / engine_comparison gain columns at the end.
# v4: decode_matrix.doubtful at the end (the columns the client verdict marked doubtful).
# v5: SLOs and costs as data (slo_limits, run_costs, prefill.engine_counters) and slo_views.sql: slo_cells,
#     slo_capacity, frontier, cell_engine_stats (docs/slo.md).
# v6: run_gpus takes a report's own GPU-hour price (session variable infermatrix_gpu_hour_usd) and says where
#     its price came from (gpu_hour_source, stored_gpu_hour_usd): a read-only open of a v5 file re-creates the view;
#     one SLO judgement (macros slo_request_verdicts / slo_verdicts) for slo_cells and slo_points, percentile limits
#     on the judged requests' own TPOT (slo_cells gains ttft_p99_ms, tpot_p50_ms, tpot_p99_ms; slo_points
#     achieved_rate); runs.status 'stopped' (issue 27).
# v7: every .sql file below is applied at every open and upgrade (so the tables and views of load.sql, workload.sql,
#     slo_search.sql, trace.sql and hosts.sql, which came in at v5 without a bump, exist in every store the code opens:
#     no run-time "does this view exist" probes); gpu_samples / gpu_cell_summary move from first use to telemetry.sql;
#     macros nearest_rank() and wilson_bound() are the one definition of those figures (slo_verdicts, slo_cells), and
#     nearest_rank rounds P/100 x n before its ceiling (p99.9 of 1000 values is rank 999, not 1000) (issue 28).
# v8: cell_interval_rows and the cell_intervals view (intervals.sql): each cell number's 95 % interval (issue 30).
# v9: repeats (matrix.repeat; docs/metrics.md, "Repeats"): cell_repeats and cell_repeat_intervals keep every repeat,
#     requests.repeat, cell_interval_rows' across-repeat columns (repeats, sd, window_lo, window_hi, noisier) shown at
#     the end of cell_intervals, decode_matrix gains repeats and noisier_than_window at the end, and the SLO views
#     judge a repeated cell's request by its own repeat's window (issue 30).
# v10: prefill_interval_rows and the prefill_intervals view (prefill_intervals.sql): each prefill point's 95 % interval
#     from its cold probes (issue 30 item 1).
# v11: sweeps over engine settings (sweeps.sql): tables sweeps, sweep_members, run_settings; views sweep_runs,
#     sweep_frontier, sweep_setting_scores, best_setting (issue 29; docs/tuning.md);
#     TTFO (requests.ttfo_ms / reasoning, point_requests.ttfo_ms / reasoning, the 'ttfo' histogram, the SLO key
#     ttfo_p<P>_ms) and burst points (burst.sql: bursts, the burst_points view) (issue 31 items 1 and 4);
#     tasks.sql: task_requests and the task_results view (issue 31 item 2: natural-length completions, task accuracy);
#     engine_samples, gpu_series, telemetry_costs and the views engine_timeline, engine_cells, gpu_cells
#     (engine_telemetry.sql); frontier gains joules_per_mtok and energy_usd_per_mtok (issue 32).
# v12: interference points (interference.sql: interference_points, the interference view; a point's status may be
#     over_capacity) (issue 31 item 3); requests.reasoning_tokens and point_requests.reasoning_tokens: the server's own
#     reasoning count per request (usage.completion_tokens_details; issue 31 item 4, checked on a real engine).
# v13: slo_search_probes.tries: how many times a probe was measured (search.client_retries), where the probe's reason
#     alone said it (issue 28).
SCHEMA_VERSION = 13
# Every .sql file of the store, in the order applied: each is idempotent (CREATE ... IF NOT EXISTS for tables,
# CREATE OR REPLACE for views and macros); a file reads the objects of those before it. A new file goes here,
# and bumps SCHEMA_VERSION (tests/store/test_schema_files.py checks both).
SCHEMA_FILES = (
    "schema.sql",  # tables; migrations are the idempotent ALTERs at its end (v1 -> v2 adds two runs columns)
    "views.sql",  # macros (context_label, latency_at, nearest_rank, wilson_bound) and the matrix views
    "engine_telemetry.sql",  # the engine's and the GPUs' time series (issue 32; core/telemetry/), before frontier reads it
    "slo_views.sql",  # SLO judgement (docs/slo.md), reads decode_matrix
    "load.sql",  # open-loop points (issue 20)
    "workload.sql",  # shared-prefix and multi-turn passes (issue 20; docs/workloads.md)
    "tasks.sql",  # the tasks workload's judged tasks and task_results (issue 31 item 2), after workload.sql
    "slo_search.sql",  # the SLO search (issue 20): reads points, point_requests, slo_limits and slo_verdicts()
    "trace.sql",  # trace-replay points (issue 20), after load.sql (its view reads points)
    "burst.sql",  # burst points (issue 31), after load.sql (its view reads points)
    "interference.sql",  # interference points (issue 31 item 3), after load.sql (its view reads points)
    "hosts.sql",  # client hosts of Ray cells (issue 21; docs/distributed.md)
    "telemetry.sql",  # GPU samples per cell (core/engine/telemetry.py)
    "intervals.sql",  # each cell number's 95 % interval (issue 30; docs/metrics.md, "Intervals")
    "prefill_intervals.sql",  # each prefill point's 95 % interval from its cold probes (issue 30; docs/metrics.md)
    "sweeps.sql",  # sweeps over engine settings (issue 29; docs/tuning.md): reads frontier, slo_cells, cell_intervals
)
MEMORY = ":memory:"

_LOCK_PID = re.compile(r"\(PID (\d+)\)")
_LOCK_HOLDER = re.compile(r"lock is held in (.+?) \(PID")


def _sql(name: str) -> str:
    return resources.files("infermatrix.core.store").joinpath(name).read_text(encoding="utf-8")


def _short(exc: BaseException) -> str:
    """DuckDB's message without its 'IO Error: ' prefix, first line only."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^[A-Za-z ]+ Error: ", "", msg)


def _precheck(p: Path, read_only: bool) -> None:
    # DuckDB's own messages for these are cryptic ("Cannot open file ... No such file or directory"),
    # and it would happily create a database the user didn't mean to in read-only flows.
    parent = p.parent
    if not parent.exists():
        raise StoreError(f"cannot open database {p}: directory {parent} does not exist")
    if not parent.is_dir():
        raise StoreError(f"cannot open database {p}: {parent} is not a directory")
    if p.is_dir():
        raise StoreError(f"cannot open database {p}: it is a directory, not a database file")
    if read_only and not p.exists():
        raise StoreError(f"no database at {p} (nothing has been run with this --db yet)")
    if not read_only:
        if p.exists() and not os.access(p, os.W_OK):
            raise StoreError(f"cannot open database {p} for writing: permission denied")
        if not p.exists() and not os.access(parent, os.W_OK):
            raise StoreError(f"cannot create database {p}: directory {parent} is not writable")


def connect(path: str | os.PathLike[str], read_only: bool = False) -> tuple[duckdb.DuckDBPyConnection, str]:
    """Open the database; returns the connection and the path as shown in messages."""
    if str(path) == MEMORY:
        if read_only:
            raise StoreError("an in-memory database cannot be opened read-only")
        return duckdb.connect(MEMORY), MEMORY
    p = Path(path).expanduser()
    _precheck(p, read_only)
    try:
        return duckdb.connect(str(p), read_only=read_only), str(p)
    except duckdb.IOException as exc:
        msg = str(exc)
        if "lock" in msg.lower():
            # Only one process may hold a DuckDB file open for writing (readers are locked out too).
            pid = _LOCK_PID.search(msg)
            holder = _LOCK_HOLDER.search(msg)
            who = f"pid {pid.group(1)}" if pid else "pid unknown"
            if holder:
                who += f", {Path(holder.group(1)).name}"
            raise StoreError(
                f"database {p} is in use by another process ({who}), probably another infermatrix run; "
                "wait for it to finish or use another --db"
            ) from None
        raise StoreError(f"cannot open database {p}: {_short(exc)}") from None
    except duckdb.Error as exc:
        # e.g. "different configuration": this process already has it open read-write, or vice versa.
        raise StoreError(f"cannot open database {p}: {_short(exc)}") from None


def stored_version(con: duckdb.DuckDBPyConnection) -> int | None:
    has_table = _one(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'")
    if not has_table:
        return None
    return _one(con, "SELECT max(version) FROM schema_version")


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    """The single value an aggregate query returns (aggregates always return one row)."""
    row = con.execute(sql).fetchone()
    assert row is not None
    return row[0]


def apply_schema(con: duckdb.DuckDBPyConnection, where: str) -> None:
    """Create what is missing and re-create views/macros, in one transaction."""
    version = stored_version(con)
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"database {where} has store schema v{version}, newer than this infermatrix (v{SCHEMA_VERSION}); upgrade infermatrix"
        )
    try:
        con.execute("BEGIN TRANSACTION")
        # A migration that can't be written as an idempotent statement goes before the file it needs.
        for name in SCHEMA_FILES:
            con.execute(_sql(name))
        if version != SCHEMA_VERSION:
            con.execute(
                "INSERT OR REPLACE INTO schema_version VALUES (?, ?)",
                [SCHEMA_VERSION, dt.datetime.now(dt.UTC).replace(tzinfo=None)],
            )
        con.execute("COMMIT")
    except duckdb.Error as exc:
        con.execute("ROLLBACK")
        raise StoreError(f"cannot set up database {where}: {_short(exc)}") from None


def check_schema(con: duckdb.DuckDBPyConnection, where: str) -> None:
    """For read-only opens, which can't create anything: the file must already be a current store."""
    try:
        version = stored_version(con)
    except duckdb.Error as exc:
        raise StoreError(f"cannot read database {where}: {_short(exc)}") from None
    if version is None:
        raise StoreError(f"{where} is not an infermatrix database (no schema_version table)")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"database {where} has store schema v{version}, newer than this infermatrix (v{SCHEMA_VERSION}); upgrade infermatrix"
        )
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"database {where} has store schema v{version}; open it once for writing (any infermatrix run with this --db) to upgrade it"
        )


def upgrade_if_older(con: duckdb.DuckDBPyConnection, where: str) -> duckdb.DuckDBPyConnection:
    """For read-only opens of a store an older infermatrix wrote: upgrade it with a short
    read-write open (the migrations only add columns and re-create views) and return a fresh
    read-only connection. If it can't be opened for writing (in use, not writable), the old
    connection comes back and check_schema says what to do."""
    try:
        version = stored_version(con)
    except duckdb.Error:
        return con
    if where == MEMORY or version is None or version >= SCHEMA_VERSION:
        return con
    con.close()
    try:
        rw, _ = connect(where, read_only=False)
        try:
            apply_schema(rw, where)
        finally:
            rw.close()
    except StoreError:
        pass
    fresh, _ = connect(where, read_only=True)
    return fresh
