"""Lint and types are part of the test command: ruff (rules in pyproject.toml) and mypy on the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.slow  # runs ruff as a process
def test_ruff_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "scripts"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_is_clean():
    # src/ is installed as `infermatrix` through a package-dir mapping mypy cannot follow, so mypy gets
    # the package through a link named infermatrix (kept beside mypy's cache, which git ignores).
    base = ROOT / ".mypy_cache" / "package"
    base.mkdir(parents=True, exist_ok=True)
    link = base / "infermatrix"
    if not link.is_symlink():
        link.symlink_to(ROOT / "src", target_is_directory=True)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "infermatrix"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "MYPYPATH": str(base)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
