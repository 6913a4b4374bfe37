"""Helpers of the real-llama.cpp tests (a module name of its own, so imports never pick another conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).parents[2]
SERVER_VAR = "INFERMATRIX_LLAMA_SERVER"
GGUF_VAR = "INFERMATRIX_TINY_GGUF"
KEY_VAR = "IMX_LLAMA_TEST_KEY"
TINY_CONFIG = ROOT / "configs" / "llamacpp-cpu-tiny.toml"
HOW = "scripts/setup-engine.sh llama-cpp builds it and prints the variables; .ci/run sets them"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``infermatrix …`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "infermatrix", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )  # fmt: skip


def processes_using(marker: str) -> list[str]:
    """Live processes whose command line mentions ``marker`` (the session's model file)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if marker in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{p.info['pid']} {cmd[:120]}")
        except psutil.Error:
            continue
    return found


def launch_args(server: str, gguf: Path, *extra: str) -> list[str]:
    return ["--set", f"engine.executable={server}", "--set", f"engine.model_source={gguf}", *extra]
