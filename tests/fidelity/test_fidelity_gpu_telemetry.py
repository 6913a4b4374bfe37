"""GPU telemetry is sampled per decode cell and stored, through the real CLI (fake nvidia-smi: no GPU here).

Judged by the sampler's own timestamps against the cell's own window, not by how many readings a loaded machine
happened to fit into a sleep: the sampler reads once when the cell starts and once when it ends (by design, not
timing), so every cell has readings of every GPU from before its window opened and after it closed."""

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
        "run", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "1,2", "--duration", "1",
        "--max-output", "64", "--db", str(db), env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    windows = dict(((c, n), (ws, we)) for c, n, ws, we in con.execute("SELECT context_tokens, concurrency, window_start, window_end FROM cells").fetchall())
    assert sorted(windows) == [(1024, 1), (1024, 2)]
    for (ctx, n), (ws, we) in windows.items():
        rows = con.execute("SELECT t_mono, list(gpu ORDER BY gpu) FROM gpu_samples WHERE context_tokens = ? AND concurrency = ? "
                           "GROUP BY t_mono ORDER BY t_mono", [ctx, n]).fetchall()  # fmt: skip
        assert all(gpus == [0, 1, 2, 3] for _, gpus in rows), rows  # every reading has all 4 GPUs, once each
        assert len(rows) >= 2 and rows[0][0] <= ws and rows[-1][0] >= we, (n, ws, we, [t for t, _ in rows])
