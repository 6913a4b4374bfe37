"""GPU telemetry is sampled per decode cell and stored, through the real CLI (fake nvidia-smi: no GPU here)."""

from __future__ import annotations

import pytest
import os
import sys
from pathlib import Path

import duckdb
from imxtest import run_cli

pytestmark = pytest.mark.slow  # starts sim servers / runs the CLI

FAKE = Path(__file__).parents[1] / "vllm" / "fake_nvidia_smi.py"


def test_samples_stored_per_cell(sim_factory, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)
    server = sim_factory("tiny")
    db = tmp_path / "g.duckdb"
    proc = run_cli(
        "run", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "1,2", "--duration", "2.5",
        "--max-output", "64", "--db", str(db), env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT concurrency, count(*), count(DISTINCT gpu) FROM gpu_samples GROUP BY 1 ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [1, 2]
    assert all(count >= 2 * gpus and gpus == 4 for _, count, gpus in rows), rows  # 4 GPUs, >= 2 samples in 2.5 s
