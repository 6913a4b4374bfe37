"""Real llama.cpp for the ``llamacpp``-marked tests: a built ``llama-server`` and the tiny GGUF.

``INFERMATRIX_LLAMA_SERVER`` names the binary and ``INFERMATRIX_TINY_GGUF`` the model
(``scripts/setup-engine.sh llama-cpp`` prints both; ``.ci/run`` exports them). Without them the
tests skip and say so; under CI=true they fail, naming the engine and showing the end of its set-up
log (tests/imxtest.py, engine_missing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from imxtest import engine_missing
from llamacpp_helpers import GGUF_VAR, HOW, SERVER_VAR


@pytest.fixture(scope="session")
def llama_server() -> str:
    path = os.environ.get(SERVER_VAR)
    if not path:
        engine_missing("llama-cpp", f"llama.cpp not built: set {SERVER_VAR} to a llama-server binary ({HOW})")
    if not Path(path).is_file():
        engine_missing("llama-cpp", f"{SERVER_VAR}={path}: no such file (the llama.cpp build failed or was removed)")
    probe = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        engine_missing("llama-cpp", f"{SERVER_VAR}={path} does not run: {(probe.stderr or probe.stdout).strip().splitlines()[-1:]}")
    return path


@pytest.fixture(scope="session")
def tiny_gguf(llama_server, tmp_path_factory) -> Path:
    """A copy of the tiny GGUF under a name of this session's own, so "no process left" can look for it."""
    src = os.environ.get(GGUF_VAR)
    if not src or not Path(src).is_file():
        engine_missing("llama-cpp", f"tiny GGUF not found: set {GGUF_VAR} ({HOW})")
    dst = tmp_path_factory.mktemp("tiny-gguf-") / "tiny-qwen2.gguf"
    shutil.copyfile(src, dst)
    return dst
