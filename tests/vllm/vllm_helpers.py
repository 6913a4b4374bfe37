"""Helpers of the real-vLLM tests (a module name of its own, so imports never pick another conftest)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from imxtest import engine_cli, processes_mentioning
from vllm_run_once import KEY_VAR, TINY_CONFIG, launch_args  # noqa: F401 (the vLLM tests import them from here)

ROOT = Path(__file__).parents[2]


# The real command line (a timeout for an engine's launch) and the process check, shared with every test folder.
cli = engine_cli
processes_using = processes_mentioning


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
