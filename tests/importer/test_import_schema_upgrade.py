"""Older stores keep working, even when the first thing that opens them is a read-only report: v1 (before
runs.source, runs.imported_at), v4 (before the SLO views), v5 as it was (before the load, workload, search, trace
and host tables), v6 (before telemetry.sql and the statistics macros). One that cannot be upgraded is refused
with one line saying how to migrate."""

from __future__ import annotations

import duckdb
import pytest

from imx_factories import fill_run
from infermatrix.core.report import render_markdown
from infermatrix.core.report.sections.prefill import PM_CAPTION
from infermatrix.core.report.slo_report import load_slo_report, slo_tables
from infermatrix.core.store import Store
from infermatrix.core.store.connect import SCHEMA_VERSION
from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.slo_search import times_measured


def make_v1(path) -> str:
    """A store as schema v1 left it: no source/imported_at columns, schema_version 1."""
    with Store(path) as s:
        run_id, _, _ = fill_run(s, seed=1, other=False)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW IF EXISTS run_summary")  # views that read runs.* must go before the columns
    con.execute("ALTER TABLE runs DROP COLUMN source")
    con.execute("ALTER TABLE runs DROP COLUMN imported_at")
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (1, now()::TIMESTAMP)")
    con.close()
    return run_id


def columns(path) -> list[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return [r[0] for r in con.execute("DESCRIBE runs").fetchall()]
    finally:
        con.close()


def test_v1_database_upgrades_on_a_read_only_open(tmp_path):
    path = tmp_path / "v1.duckdb"
    run_id = make_v1(path)
    assert "source" not in columns(path)
    assert SCHEMA_VERSION >= 2
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.get_run(run_id)["source"] is None
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"source", "imported_at"} <= set(columns(path))


def test_v1_database_upgrades_on_a_write_open(tmp_path):
    path = tmp_path / "v1w.duckdb"
    run_id = make_v1(path)
    with Store(path) as s:
        s.update_run(run_id, source="published page x.txt")
        assert s.get_run(run_id)["source"] == "published page x.txt"
        assert len(s.list_runs()) == 1


def make_v4(path) -> str:
    """A store as schema v4 left it: no SLO tables or views, no prefill.engine_counters, schema_version 4."""
    with Store(path) as s:
        run_id, _, _ = fill_run(s, seed=1, other=False)
    con = duckdb.connect(str(path))
    for view in ("frontier", "slo_capacity", "slo_cells", "slo_requests", "request_latencies", "run_gpus", "cell_engine_stats"):
        con.execute(f"DROP VIEW {view}")
    con.execute("DROP VIEW prefill_list")  # reads prefill.*: must go before the column
    con.execute("DROP TABLE slo_limits")
    con.execute("DROP TABLE run_costs")
    con.execute("ALTER TABLE prefill DROP COLUMN engine_counters")
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (4, now()::TIMESTAMP)")
    con.close()
    return run_id


def test_v4_database_gains_the_slo_views_and_report_slo_judges_it(tmp_path):
    from imx_factories import REFERENCE_VALID

    from infermatrix.core.slo import parse_slo
    from infermatrix.core.store.slo_store import save_slos

    path = tmp_path / "v4.duckdb"
    run_id = make_v4(path)
    with Store(path, read_only=True) as s:  # a read-only report upgrades it first
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM slo_cells")[1] == [(0,)]
        assert "# Speed test matrix" in render_markdown(s, run_id)
    with Store(path) as s:  # what `report --slo` does: attach, then read the views
        save_slos(s, run_id, [parse_slo("ttft_p99_ms=2000,tpot_p99_ms=50")])
        judged = s.query("SELECT count(*) FROM slo_cells WHERE run_id = ? AND meets IS NOT NULL", [run_id])[1][0][0]
        # every valid cell with a request that ended in its window (the SLO judges requests, docs/metrics.md)
        with_requests = s.query("SELECT count(DISTINCT (q.context_tokens, q.concurrency)) FROM requests q JOIN cells c USING "
                                "(run_id, context_tokens, concurrency) WHERE q.run_id = ? AND c.status = 'valid' AND q.outcome <> "
                                "'cancelled' AND q.ended BETWEEN c.window_start AND c.window_end", [run_id])[1][0][0]  # fmt: skip
        assert 0 < judged == with_requests <= len(REFERENCE_VALID)
        # prefill points measured before engine statistics existed say so
        notes = {n for (n,) in s.query("SELECT prefix_cache_note FROM cell_engine_stats WHERE phase = 'prefill'")[1]}
        assert notes == {"not recorded (measured before engine statistics existed)"}


def _set_version(con: duckdb.DuckDBPyConnection, version: int) -> None:
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP)", [version])


# What v7 added (connect.py): telemetry.sql's table and view (v6 made them on a GPU run's first save) and the macros.
V7_MACROS = ("nearest_rank", "wilson_bound", "wilson_score", "request_tpot_ms", "request_tps")


# What v11 added (connect.py): sweeps (issue 29), bursts and TTFO (issue 31 items 1, 4), judged tasks (item 2), the
# telemetry time series and the frontier's energy columns (issue 32).
V11_OBJECTS = {"engine_samples", "gpu_series", "telemetry_costs", "engine_series", "engine_timeline", "engine_cells", "gpu_cells"}
V11_VIEWS = ("best_setting", "sweep_setting_scores", "sweep_frontier", "sweep_runs", "frontier", "gpu_cells", "engine_cells",
             "engine_timeline", "engine_series", "burst_points", "task_results")  # fmt: skip
V11_TABLES = ("run_settings", "sweep_members", "sweeps", "engine_samples", "gpu_series", "telemetry_costs", "bursts", "task_requests")


def make_v10(path) -> str:
    """A store as schema v10 left it: none of v11's tables and views, no ttfo_ms / reasoning columns on requests and
    point_requests, a frontier without energy columns."""
    with Store(path) as s:
        run_id, _, _ = fill_run(s, seed=1, other=False)
    con = duckdb.connect(str(path))
    for view in V11_VIEWS:
        con.execute(f"DROP VIEW {view}")
    for table in V11_TABLES:
        con.execute(f"DROP TABLE {table}")
    for table in ("requests", "point_requests"):
        for column in ("ttfo_ms", "reasoning", "reasoning_tokens"):
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    _set_version(con, 10)
    con.close()
    return run_id


def test_v10_database_gains_the_task_table_and_view_on_a_read_only_open(tmp_path):
    path = tmp_path / "v10.duckdb"
    run_id = make_v10(path)
    assert not {"task_results", "task_requests"} & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM task_results WHERE run_id = ?", [run_id])[1] == [(0,)]
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"task_results", "task_requests"} <= objects(path)


def test_v10_database_gains_the_telemetry_tables_and_views_on_a_read_only_open(tmp_path):
    path = tmp_path / "v10.duckdb"
    run_id = make_v10(path)
    assert not V11_OBJECTS & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM engine_cells WHERE run_id = ? AND samples > 0", [run_id])[1] == [(0,)]
        cols, rows = s.query("SELECT joules_per_mtok FROM frontier WHERE run_id = ?", [run_id])
        assert rows and all(r[0] is None for r in rows)
        assert "## Engine and GPU" not in render_markdown(s, run_id)
    assert V11_OBJECTS <= objects(path)


def make_v9(path) -> str:
    """A store as schema v9 left it: no prefill_interval_rows table, no prefill_intervals view (v10, issue 30)."""
    with Store(path) as s:
        run_id, _, _ = fill_run(s, seed=1, other=False)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW prefill_intervals")
    con.execute("DROP TABLE prefill_interval_rows")
    _set_version(con, 9)
    con.close()
    return run_id


def test_v9_database_gains_the_prefill_interval_table_and_view_on_a_read_only_open(tmp_path):
    path = tmp_path / "v9.duckdb"
    run_id = make_v9(path)
    assert not {"prefill_intervals", "prefill_interval_rows"} & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM prefill_intervals WHERE run_id = ?", [run_id])[1] == [(0,)]
        markdown = render_markdown(s, run_id)
        assert "# Speed test matrix" in markdown and PM_CAPTION not in markdown  # no interval: no ± note on the prefill table
    assert {"prefill_intervals", "prefill_interval_rows"} <= objects(path)


def make_v7(path) -> str:
    """A store as schema v7 left it: no cell_interval_rows table, no cell_intervals view (v8, issue 30)."""
    run_id = make_v8(path)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW cell_intervals")
    con.execute("DROP TABLE cell_interval_rows")
    _set_version(con, 7)
    con.close()
    return run_id


def test_v7_database_gains_the_interval_table_and_view_on_a_read_only_open(tmp_path):
    path = tmp_path / "v7.duckdb"
    run_id = make_v7(path)
    assert not {"cell_intervals", "cell_interval_rows"} & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM cell_intervals WHERE run_id = ?", [run_id])[1] == [(0,)]
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"cell_intervals", "cell_interval_rows"} <= objects(path)


def make_v6(path) -> str:
    """A store as schema v6 left it: no gpu_samples / gpu_cell_summary (no GPU run saved samples), none of v7's macros."""
    run_id = make_v7(path)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW gpu_cell_summary")
    con.execute("DROP TABLE gpu_samples")
    for macro in V7_MACROS:
        con.execute(f"DROP MACRO {macro}")
    _set_version(con, 6)
    con.close()
    return run_id


def objects(path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        found = con.execute("SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal "
                            "UNION ALL SELECT function_name FROM duckdb_functions() WHERE NOT internal").fetchall()  # fmt: skip
        return {r[0] for r in found}
    finally:
        con.close()


def test_v6_database_gains_telemetry_and_the_macros_on_a_read_only_open(tmp_path):
    from infermatrix.core.slo import parse_slo
    from infermatrix.core.store.slo_store import save_slos

    path = tmp_path / "v6.duckdb"
    run_id = make_v6(path)
    assert not {"gpu_samples", "gpu_cell_summary", *V7_MACROS} & objects(path)
    with Store(path, read_only=True) as s:  # a read-only report upgrades it first
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM gpu_cell_summary WHERE run_id = ?", [run_id])[1] == [(0,)]
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"gpu_samples", "gpu_cell_summary", *V7_MACROS} <= objects(path)
    with Store(path) as s:  # the SLO views judge it through the macros
        save_slos(s, run_id, [parse_slo("ttft_p99_ms=2000,tpot_p99_ms=50")])
        judged = s.query("SELECT count(*) FROM slo_cells WHERE run_id = ? AND attainment_lo <= attainment AND meets IS NOT NULL",
                         [run_id])[1][0][0]  # fmt: skip
        assert judged > 0


def make_v5(path) -> str:
    """A store as a v5 infermatrix wrote it before load.sql, workload.sql, slo_search.sql, trace.sql and hosts.sql came
    in (they came without a version bump): none of their tables and views."""
    run_id = make_v6(path)
    con = duckdb.connect(str(path))
    for view in ("trace_arrivals", "slo_search", "slo_points", "point_latencies", "load_points", "prefix_reuse", "turns",
                 "ttft_by_cached_fraction", "cell_hosts"):  # fmt: skip
        con.execute(f"DROP VIEW {view}")
    for table in ("trace_requests", "trace_points", "slo_search_probes", "slo_searches", "point_requests", "points",
                  "workload_requests", "workload_passes", "cell_host_stats"):  # fmt: skip
        con.execute(f"DROP TABLE {table}")
    _set_version(con, 5)
    con.close()
    return run_id


def test_v5_database_without_the_issue_20_tables_is_reported_in_full_read_only(tmp_path):
    """No report section asks whether a view exists: the upgrade made every one, so every section reads it."""
    from infermatrix.core.report.json_report import render_json

    path = tmp_path / "v5.duckdb"
    run_id = make_v5(path)
    assert "load_points" not in objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        report = render_json(s, run_id)
        assert (report["points"], report["trace"], report["workload"]["reuse"], report["slo"]["search"]) == ([], [], None, [])
        assert report["decode"] and "# Speed test matrix" in render_markdown(s, run_id)
    assert {"load_points", "slo_search", "trace_arrivals", "prefix_reuse", "cell_hosts", "gpu_cell_summary"} <= objects(path)


def test_an_older_store_that_cannot_be_upgraded_is_refused_in_one_line(tmp_path):
    """Held open read-only elsewhere in this process, the file cannot be opened for writing to upgrade it."""
    path = tmp_path / "held.duckdb"
    make_v6(path)
    held = duckdb.connect(str(path), read_only=True)
    try:
        with pytest.raises(StoreError) as err:
            Store(path, read_only=True)
    finally:
        held.close()
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == f"database {path} has store schema v6; open it once for writing (any infermatrix run with this --db) to upgrade it"


def make_v8(path) -> str:
    """A store as schema v8 left it: no repeats (v9, issue 30 item 2) — no cell_repeats / cell_repeat_intervals, no
    requests.repeat, cell_interval_rows without its across-repeat columns."""
    run_id = make_v9(path)
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE cell_repeats")
    con.execute("DROP TABLE cell_repeat_intervals")
    con.execute("ALTER TABLE requests DROP COLUMN repeat")
    for col in ("repeats", "sd", "window_lo", "window_hi", "noisier"):
        con.execute(f"ALTER TABLE cell_interval_rows DROP COLUMN {col}")
    _set_version(con, 8)
    con.close()
    return run_id


def test_v8_database_gains_repeats_on_a_read_only_open_and_reads_as_before(tmp_path):
    path = tmp_path / "v8.duckdb"
    run_id = make_v8(path)
    assert not {"cell_repeats", "cell_repeat_intervals"} & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        cols, found = s.query("SELECT repeats, noisier_than_window FROM decode_matrix WHERE run_id = ?", [run_id])
        assert found and all(r == (None, None) for r in found)  # measured once: no repeats, nothing judged
        assert s.query("SELECT count(*) FROM cell_repeats")[1] == [(0,)]
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"cell_repeats", "cell_repeat_intervals"} <= objects(path)


def test_v10_database_gains_bursts_and_ttfo_on_a_read_only_open(tmp_path):
    path = tmp_path / "v10.duckdb"
    run_id = make_v10(path)
    assert not {"bursts", "burst_points"} & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM burst_points WHERE run_id = ?", [run_id])[1] == [(0,)]
        assert s.query("SELECT count(*) FROM requests WHERE run_id = ? AND ttfo_ms IS NULL AND reasoning IS NULL", [run_id])[1][0][0] > 0
        assert s.query("SELECT count(*) FROM slo_cells WHERE run_id = ?", [run_id])[0]  # the SLO views read the new columns
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"bursts", "burst_points"} <= objects(path)


def make_v11(path) -> str:
    """A store as schema v11 left it: no interference table or view (v12, issue 31 item 3), no reasoning_tokens column
    on requests and point_requests (v12, issue 31 item 4)."""
    with Store(path) as s:
        run_id, _, _ = fill_run(s, seed=1, other=False)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW interference")
    con.execute("DROP TABLE interference_points")
    for table in ("requests", "point_requests"):
        con.execute(f"ALTER TABLE {table} DROP COLUMN reasoning_tokens")
    _set_version(con, 11)
    con.close()
    return run_id


def test_v11_database_gains_the_interference_table_and_view_on_a_read_only_open(tmp_path):
    path = tmp_path / "v11.duckdb"
    run_id = make_v11(path)
    assert not {"interference", "interference_points"} & objects(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM interference WHERE run_id = ?", [run_id])[1] == [(0,)]
        stored = s.query("SELECT count(*), count(reasoning_tokens) FROM requests WHERE run_id = ?", [run_id])[1][0]
        assert stored[0] > 0 and stored[1] == 0  # the column is there, NULL: v11 never stored the server's count
        assert s.query("SELECT count(reasoning_tokens) FROM point_requests")[1] == [(0,)]
        assert "# Speed test matrix" in render_markdown(s, run_id)
    assert {"interference", "interference_points"} <= objects(path)


def make_v12(path) -> str:
    """A store as schema v12 left it: no slo_search_probes.tries (v13), a probe measured twice said so only in its
    reason (search.client_retries came in at v12)."""
    with Store(path) as s:
        run_id, _, _ = fill_run(s, seed=1, other=False)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE slo_search_probes DROP COLUMN tries")
    con.execute("INSERT INTO slo_searches (run_id, slo, over, status) VALUES (?, 'tight', 'concurrency', 'found')", [run_id])
    con.execute("INSERT INTO slo_search_probes (run_id, probe, load, status, verdict, reason) VALUES "
                "(?, 0, 1, 'valid', 'pass', NULL), (?, 1, 2, 'valid', 'fail', ?)",
                [run_id, run_id, "measured 2 times, client_bound before (try 1: stamps held by stalls)"])  # fmt: skip
    _set_version(con, 12)
    con.close()
    return run_id


def test_v12_database_gains_probe_tries_on_a_read_only_open_and_a_retried_probe_still_reads_as_retried(tmp_path):
    path = tmp_path / "v12.duckdb"
    run_id = make_v12(path)
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        cols, rows = s.query("SELECT * FROM slo_search_probes WHERE run_id = ? ORDER BY probe", [run_id])
        probes = [dict(zip(cols, r)) for r in rows]
        assert [p["tries"] for p in probes] == [None, None]  # the column is there, NULL: v12 never stored it
        assert [times_measured(p) for p in probes] == [1, 2]  # ... and the reason still says how many times
        (caption,) = [t.caption for t in slo_tables(load_slo_report(s, [run_id])) if t.title == "SLO search probes"]
        assert caption.endswith(f"; probe 1: {probes[1]['reason']}")
