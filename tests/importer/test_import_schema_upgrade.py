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
