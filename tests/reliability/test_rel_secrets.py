"""No secret leaks: the API key flows to the server in headers and appears nowhere we keep or print —
not in the database file, the logs, the CLI's output, or any report format — even when the server
echoes it back in error bodies and prints it in its own log."""

from __future__ import annotations

import pytest
import json

import duckdb
from rel_helpers import Sim, assert_nothing_left, cells, one_error_line, run_cli, run_row, sim_config, write_profile

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI

KEY = "sk-imx-rel-7f3a9c2e5b1d4086"
ENV = {"IMX_REL_KEY": KEY}


def _text_columns(db) -> list[tuple[str, str]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type IN ('VARCHAR', 'JSON') AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE')"
        ).fetchall()
    finally:
        con.close()


def _count_in_db(db, needle: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return sum(
            con.execute(f'SELECT count(*) FROM "{t}" WHERE contains(CAST("{c}" AS VARCHAR), ?)', [needle]).fetchone()[0]
            for t, c in _text_columns(db)
        )
    finally:
        con.close()


def test_key_is_never_kept_or_printed(tmp_path):
    once = tmp_path / "crashed-once"
    profile = write_profile(tmp_path / "leaky.json", {
        "log_api_key": True,  # the engine prints its key at startup, into the log we capture
        "requests": [{"kind": "http_error", "status": 500, "every": 5, "message": "upstream said: {authorization}"}],
        "exit": {"after_requests": 9, "code": 4, "once_file": str(once)},  # the log tail is kept with the crashed cell
    })  # fmt: skip
    db = tmp_path / "r.duckdb"
    cfg = sim_config(tmp_path, profile, prefill_contexts=["1K"])
    text = cfg.read_text().replace('ready_timeout_s = 30', 'ready_timeout_s = 30\napi_key_env = "IMX_REL_KEY"')
    cfg.write_text(text)
    proc = run_cli("run", str(cfg), "--db", str(db), cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert once.exists()  # it crashed, so a log tail was read

    outputs = {"stdout": proc.stdout, "stderr": proc.stderr}
    for fmt in ("text", "markdown", "json"):
        rep = run_cli("report", "--db", str(db), "--format", fmt, cwd=tmp_path, env=ENV)
        assert rep.returncode == 0, rep.stderr
        outputs[f"report {fmt}"] = rep.stdout + rep.stderr
    rep = run_cli("report", "--db", str(db), "--format", "html", "-o", str(tmp_path / "report.html"), cwd=tmp_path)
    outputs["report.html"] = (tmp_path / "report.html").read_text()
    for name, out in outputs.items():
        assert KEY not in out, f"the key leaked into {name}"

    files = [p for p in db.with_suffix(".runs").rglob("*") if p.is_file()]
    assert any(p.name == "sim.log" for p in files)
    for p in [db, *files]:
        assert KEY.encode() not in p.read_bytes(), f"the key is in {p}"
    assert _count_in_db(db, KEY) == 0  # also as stored values (the file may compress them)
    assert _count_in_db(db, KEY[4:20]) == 0
    # The key went through: the server requires it and answered (ok requests exist), and echoed it (redacted).
    assert _count_in_db(db, "Bearer <redacted>") > 0
    assert sum(c["flags"]["outcomes"].get("ok", 0) for c in cells(db).values()) > 0
    assert any("<redacted>" in (c["flags"].get("engine_log_tail") or "") for c in cells(db).values())
    run = run_row(db)
    assert "IMX_REL_KEY" in json.loads(run["config"])["engine"]["api_key_env"]  # the variable's name, not its value
    assert_nothing_left(tmp_path)


def test_wrong_key_is_one_clear_line(tmp_path):
    sim = Sim(write_profile(tmp_path / "p.json"), tmp_path / "sim.log", api_key=KEY)
    try:
        wrong = "sk-imx-wrong-0123456789abcdef"
        (tmp_path / "key.txt").write_text(wrong + "\n")
        for args in (["--api-key-file", str(tmp_path / "key.txt")], []):
            proc = run_cli("run", "--base-url", sim.base_url, "--model", "sim-tiny", "--contexts", "1K", *args,
                           "--db", "r.duckdb", cwd=tmp_path)  # fmt: skip
            assert proc.returncode == 2, proc.stderr
            line = one_error_line(proc.stderr)
            assert "refused" in line and "401" in line
            assert KEY not in proc.stderr + proc.stdout and wrong not in proc.stderr + proc.stdout
    finally:
        sim.stop()
