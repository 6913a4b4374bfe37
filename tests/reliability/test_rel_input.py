"""Bad input: one clear line on stderr, exit code 2, nothing launched (and no run created)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest
from rel_helpers import (
    Cli, assert_nothing_left, free_port, one_error_line, processes_mentioning, run_cli, sim_config, write_profile,
)

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI


def _bad(tmp_path, *args: str, env: dict | None = None) -> str:
    proc = run_cli(*args, cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    line = one_error_line(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert not processes_mentioning(str(tmp_path)), "something was launched"
    return line


@pytest.fixture
def sim_cfg(tmp_path):
    return sim_config(tmp_path, write_profile(tmp_path / "p.json"))


def test_malformed_config(tmp_path):
    (tmp_path / "bad.toml").write_text("[engine\nkind = 'sim'\n")
    line = _bad(tmp_path, "run", "bad.toml", "--db", "r.duckdb")
    assert "bad.toml: not valid TOML" in line
    assert not (tmp_path / "r.duckdb").exists()


def test_unknown_field_and_wrong_type(tmp_path, sim_cfg):
    text = sim_cfg.read_text()
    (tmp_path / "typo.toml").write_text(text.replace("duration_s", "duraton_s"))
    assert "matrix.duraton_s: unknown field" in _bad(tmp_path, "run", "typo.toml", "--db", "r.duckdb")
    assert "matrix.duration_s" in _bad(tmp_path, "run", str(sim_cfg), "--db", "r.duckdb", "--set", "matrix.duration_s=abc")
    assert not (tmp_path / "r.duckdb").exists()


def test_unknown_engine(tmp_path, sim_cfg):
    (tmp_path / "eng.toml").write_text(sim_cfg.read_text().replace('kind = "sim"', 'kind = "nosuch"'))
    assert "unknown engine kind 'nosuch'" in _bad(tmp_path, "run", "eng.toml", "--db", "r.duckdb")
    assert "unknown engine kind 'nosuch'" in _bad(tmp_path, "run", "--engine", "nosuch", "--base-url", "http://127.0.0.1:9", "--db", "r.duckdb")


@pytest.mark.parametrize("flag, value, expect", [
    ("--duration", "abc", "--duration: 'abc' is not a number"),
    ("--duration", "-1", "--duration: must be greater than 0"),
    ("--max-output", "1.5", "--max-output: '1.5' is not a whole number"),
    ("--concurrency", "1,x", "--concurrency"),
    ("--contexts", "1Q", "--contexts"),
    ("--api", "grpc", "--api"),
])  # fmt: skip
def test_non_numeric_flags(tmp_path, sim_cfg, flag, value, expect):
    assert expect in _bad(tmp_path, "run", str(sim_cfg), "--db", "r.duckdb", flag, value)


def test_impossible_matrix_is_found_before_launch(tmp_path, sim_cfg):
    # tiny's max_model_len is 4096: a 4K prompt plus 16 output tokens can't fit.
    line = _bad(tmp_path, "run", str(sim_cfg), "--db", "r.duckdb", "--set", 'matrix.contexts=["1K", "4K"]')
    assert "4K + 16 output tokens exceeds max_model_len 4096" in line
    line = _bad(tmp_path, "run", "--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m", "--contexts", "8K",
                "--max-output", "256", "--set", "engine.max_model_len=8192", "--db", "r.duckdb")  # fmt: skip
    assert "8K + 256 output tokens exceeds max_model_len 8192 (engine.max_model_len)" in line
    assert not (tmp_path / "r.duckdb").exists()


def test_unreachable_base_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    line = _bad(tmp_path, "run", "--base-url", url, "--model", "m", "--contexts", "1K", "--db", "r.duckdb")
    assert f"cannot reach {url}" in line and "is the server running?" in line
    assert not (tmp_path / "r.duckdb").exists()  # probed before the run was created; the database made for it removed (issue 27)
    assert "not an http" in _bad(tmp_path, "run", "--base-url", "localhost-8000", "--model", "m", "--db", "r.duckdb")


def test_missing_key(tmp_path, sim_cfg):
    line = _bad(tmp_path, "run", str(sim_cfg), "--db", "r.duckdb", "--set", "engine.api_key_env=IMX_NO_SUCH_VAR")
    assert "IMX_NO_SUCH_VAR is not set" in line
    assert "cannot read" in _bad(tmp_path, "run", str(sim_cfg), "--db", "r.duckdb", "--set", f"engine.api_key_file={tmp_path}/nope")


def test_missing_database_directory(tmp_path, sim_cfg):
    line = _bad(tmp_path, "run", str(sim_cfg), "--db", str(tmp_path / "no" / "such" / "r.duckdb"))
    assert "does not exist" in line
    assert not (tmp_path / "no").exists()


def test_read_only_database_directory(tmp_path, sim_cfg):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:  # root writes anywhere a mode allows nothing; an immutable directory stops it too
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode:
            pytest.skip("running as root without chattr +i: no way to make a read-only directory")
    else:
        ro.chmod(0o555)
    try:
        line = _bad(tmp_path, "run", str(sim_cfg), "--db", str(ro / "r.duckdb"))
        assert "not writable" in line
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(ro)], check=True)
        ro.chmod(0o755)


def test_resume_flags_and_unknown_run(tmp_path):
    from infermatrix.core.store import Store

    assert "--duration: not with --resume" in _bad(tmp_path, "run", "--resume", "abc", "--duration", "5")
    Store(tmp_path / "r.duckdb").close()
    assert "no run matches 'abc'" in _bad(tmp_path, "resume", "abc", "--db", "r.duckdb")
    assert "no database at none.duckdb" in _bad(tmp_path, "resume", "abc", "--db", "none.duckdb")
    assert not (tmp_path / "none.duckdb").exists()


def test_two_runs_on_one_database(tmp_path, sim_cfg):
    db = tmp_path / "r.duckdb"
    first = Cli("run", str(sim_cfg), "--db", str(db), "--set", "matrix.duration_s=5", cwd=tmp_path, name="first")
    try:
        first.engine_port()  # the first run holds the database and has launched its engine
        proc = run_cli("run", str(sim_cfg), "--db", str(db), cwd=tmp_path, timeout=60)
        assert proc.returncode == 2
        line = one_error_line(proc.stderr)
        assert "is in use by another process" in line and f"pid {first.proc.pid}" in line
        assert len(list(db.with_suffix(".runs").iterdir())) == 1  # the second run created nothing, launched nothing
    finally:
        first.signal(signal.SIGINT)
        assert first.wait(30) == 130
    assert_nothing_left(tmp_path, first)
