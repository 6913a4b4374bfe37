"""Schema v2 (runs.source, runs.imported_at): databases written by v1 keep working, even when the
first thing that opens them is a read-only report."""

from __future__ import annotations

import duckdb

from imx_factories import fill_run
from infermatrix.core.report import render_markdown
from infermatrix.core.store import Store
from infermatrix.core.store.connect import SCHEMA_VERSION


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
