"""issue 27 item 10: a full disk while a cell is saved ends the run with the exact command that resumes it.
The fault is injected where DuckDB writes a cell's requests (the error DuckDB raises on ENOSPC), so the store's own
error handling runs; a real sim over loopback, the command line in-process (click's runner)."""

from __future__ import annotations

import duckdb
from click.testing import CliRunner

from infermatrix.cli.run_cmd import resume, run
from infermatrix.core.store import Store

ENOSPC = "IO Error: Could not write file \"x.duckdb.wal\": No space left on device"


def test_a_full_disk_names_the_resume_command_and_that_command_resumes(tmp_path, sim_factory, monkeypatch):
    sim = sim_factory("tiny")
    db = tmp_path / "full.duckdb"
    real = Store._bulk_insert

    def disk_full(self, table, columns, data):
        if table == "requests":  # a decode cell's requests: the cell's transaction fails and is rolled back
            raise duckdb.IOException(ENOSPC)
        return real(self, table, columns, data)

    monkeypatch.setattr(Store, "_bulk_insert", disk_full)
    args = ["--base-url", sim.base_url, "--contexts", "1K", "--concurrency", "1", "--duration", "1", "--max-output", "16"]
    result = CliRunner().invoke(run, [*args, "--db", str(db)], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    with Store(db, read_only=True) as s:
        (rid, status, error), = s.query("SELECT run_id, status, error FROM runs")[1]
    assert status == "failed" and "could not save cell 1K x 1" in error and "No space left on device" in error
    assert "Traceback" not in result.output
    assert f"resume with: infermatrix resume {rid} --db {db}" in result.output, result.output
    monkeypatch.undo()  # space again: the named command finishes the run
    again = CliRunner().invoke(resume, [rid, "--db", str(db)], env={"COLUMNS": "400"})
    assert again.exit_code == 0, again.output
    with Store(db, read_only=True) as s:
        assert s.query("SELECT status FROM runs")[1] == [("completed",)]
        assert s.query("SELECT context_tokens, concurrency FROM cells")[1] == [(1024, 1)]  # measured and saved this time
