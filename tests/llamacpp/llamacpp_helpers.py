"""Helpers of the real-llama.cpp tests (a module name of its own, so imports never pick another conftest)."""

from __future__ import annotations

from pathlib import Path

from imxtest import engine_cli, processes_mentioning

ROOT = Path(__file__).parents[2]
SERVER_VAR = "INFERMATRIX_LLAMA_SERVER"
GGUF_VAR = "INFERMATRIX_TINY_GGUF"
KEY_VAR = "IMX_LLAMA_TEST_KEY"
TINY_CONFIG = ROOT / "configs" / "llamacpp-cpu-tiny.toml"
HOW = "scripts/setup-engine.sh llama-cpp builds it and prints the variables; .ci/run sets them"


# The real command line (a timeout for an engine's launch) and the process check, shared with every test folder.
cli = engine_cli
processes_using = processes_mentioning


def launch_args(server: str, gguf: Path, *extra: str) -> list[str]:
    return ["--set", f"engine.executable={server}", "--set", f"engine.model_source={gguf}", *extra]
