"""A bug inside a run (not the engine's doing, not the user's) still ends in one line and exit 1,
with the traceback kept in a file (in-process through click's runner: no process started)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

import infermatrix.core.run.runner as runner_module
from infermatrix.cli.run_cmd import run


def test_internal_error_is_one_line_and_a_file(tmp_path, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("a bug with the key sk-secret-123 in it")

    monkeypatch.setattr(runner_module, "execute_run", broken)
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    result = CliRunner().invoke(run, ["--engine", "openai", "--base-url", "http://127.0.0.1:9", "--model", "m",
                                      "--api-key-env", "MY_KEY", "--db", str(tmp_path / "r.duckdb")])  # fmt: skip
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: run stopped by an internal error (RuntimeError"), result.output
    assert "sk-secret-123" not in result.output
    details = Path(re.search(r"details: (\S+)", lines[0]).group(1))
    text = details.read_text()
    details.unlink()
    assert "Traceback" in text and "RuntimeError" in text and "sk-secret-123" not in text
