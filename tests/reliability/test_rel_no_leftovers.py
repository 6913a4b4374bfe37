"""issue 27 item 10: a run that never starts leaves no database behind. An unreachable --base-url used to leave an
empty new.duckdb (the store is opened first, to check its directory and lock, before the URL is probed). In-process
through click's runner; port 1 on loopback refuses at once (no process started)."""

from __future__ import annotations

from click.testing import CliRunner

from infermatrix.cli.run_cmd import run
from infermatrix.core.store import Store

UNREACHABLE = ["--base-url", "http://127.0.0.1:1", "--model", "x"]


def test_an_unreachable_url_leaves_no_database(tmp_path):
    db = tmp_path / "new.duckdb"
    result = CliRunner().invoke(run, [*UNREACHABLE, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "cannot reach http://127.0.0.1:1" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file, no .wal, no new.runs/


def test_a_database_that_was_there_is_kept(tmp_path):
    db = tmp_path / "old.duckdb"
    Store(db).close()  # made before, holding no run: not this run's to remove
    result = CliRunner().invoke(run, [*UNREACHABLE, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert db.exists()
