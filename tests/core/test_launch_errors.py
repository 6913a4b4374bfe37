"""A launched engine whose program does not exist is a one-line user error (exit 2), not a traceback."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from imxtest import ROOT, run_cli

from infermatrix.core.config import ConfigError, EngineConfig
from infermatrix.core.engine.contract import EngineError, LaunchedEngine, missing_executable


class _Cfg(EngineConfig):
    kind: str = "probe"


class _Engine(LaunchedEngine):
    program = "/nonexistent/engine-binary"

    def command(self) -> list[str]:
        return [self.program, "--port", str(self.port)]


def test_missing_executable_reasons(tmp_path: Path):
    assert missing_executable("/nonexistent/x") == "'/nonexistent/x' does not exist"
    assert "not on PATH" in (missing_executable("no-such-program-imx") or "")
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    assert "not an executable file" in (missing_executable(str(plain)) or "")
    assert "not an executable file" in (missing_executable(str(tmp_path)) or "")
    assert missing_executable("sh") is None


def test_preflight_names_the_program(tmp_path: Path):
    engine = _Engine(_Cfg(), tmp_path)
    with pytest.raises(ConfigError, match=r"cannot launch probe: '/nonexistent/engine-binary' does not exist"):
        engine.preflight()
    attached = _Engine(_Cfg(base_url="http://127.0.0.1:1"), tmp_path)
    attached.preflight()  # attaching launches nothing: nothing to check


@pytest.mark.slow  # Popen is tried for real (and fails): the fast loop starts no process
def test_start_without_program_is_an_engine_error(tmp_path: Path):
    """If the program vanishes after preflight (or before a restart), start() fails in one line."""
    engine = _Engine(_Cfg(), tmp_path)
    with pytest.raises(EngineError, match="cannot start probe: '/nonexistent/engine-binary' does not exist"):
        anyio.run(engine.start)
    assert engine.child is None and not engine.alive()


@pytest.mark.slow
def test_run_with_missing_vllm_is_one_line(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    proc = run_cli(
        "run", str(ROOT / "configs" / "vllm-cpu-tiny.toml"), "--db", str(db),
        "--set", "engine.python=null", "--set", f"engine.executable={tmp_path / 'nowhere' / 'vllm'}",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: engine: cannot launch vllm:") and "does not exist" in lines[0]
    assert not any((tmp_path / "r.runs").glob("*"))  # no run directory left behind
