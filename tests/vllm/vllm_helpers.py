"""Helpers of the real-vLLM tests (a module name of its own, so imports never pick another conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

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
