"""The plugin tutorial's example (docs/examples/toy-engine), built and installed as a separate package,
gets steady-state detection, admission limits and token reconciliation from its own metric names.

The package is copied to a temporary directory, installed with pip (offline, ``--no-deps``) into a
``--target`` directory that only the child processes see (PYTHONPATH), and found through its entry point.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import duckdb
import pytest
from imxtest import ROOT, SimServer, run_cli

EXAMPLE = ROOT / "docs" / "examples" / "toy-engine"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy")
    src = tmp / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = tmp / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(src)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (site / "infermatrix_toy.py").exists()
    return tmp, {"PYTHONPATH": str(site)}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]


def test_toy_is_listed_only_where_installed(toy_env):
    _, env = toy_env
    listed = run_cli("plugins", env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    row = next(ln for ln in lines if "infermatrix_toy" in ln)
    header = next(ln for ln in lines if "┃" in ln)
    # Step 7 of the tutorial shows the header and toy's row as the command prints them (cell by cell).
    (shown,) = [m.group(1) for m in re.finditer(r"```text\n(.*?)```", (ROOT / "docs" / "writing-a-plugin.md").read_text(), re.DOTALL)]
    doc_header, doc_row = shown.strip().splitlines()
    assert _cells(doc_header) == _cells(header) and _cells(doc_row) == _cells(row) == ["toy", "infermatrix_toy", "toy", "register_engines"]
    assert "infermatrix_toy" not in run_cli("plugins").stdout  # nothing leaked into the project's environment


def test_toy_matrix_uses_its_own_metric_names(toy_env):
    tmp, env = toy_env
    server = SimServer(str(EXAMPLE / "toy-sim.toml"), tmp / "sim.log")  # toy's names, at most 2 running
    try:
        db = tmp / "toy.duckdb"
        proc = run_cli(
            "run", "--engine", "toy", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "1,4",
            "--duration", "1.5", "--max-output", "128", "--db", str(db),
            "--set", "matrix.steady_timeout_s=1", "--set", "matrix.check_client=false", env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "engine metrics not found" not in proc.stderr + proc.stdout
        con = duckdb.connect(str(db), read_only=True)
        engine, capacity_source, kv, metrics = con.execute("SELECT engine, capacity_source, kv_tokens, engine_metrics FROM runs").fetchone()
        assert engine == "toy"  # stored under its own kind
        assert kv == 20_000 and capacity_source.startswith("toy:cache_config")  # from ToyEngine.read_capacity
        metrics = json.loads(metrics)
        assert metrics["found"] is True and metrics["metrics"]["running"] == "toy:running"
        flags = {n: json.loads(f) for n, f in con.execute("SELECT concurrency, flags FROM cells").fetchall()}
        # N = 1 fits under the server's limit of 2: steady state reached, read through toy:running / toy:waiting.
        assert flags[1]["steady_state"]["reached"] is True and flags[1]["steady_state"]["engine_metrics"] is True
        assert not flags[1].get("admission_limited")
        # N = 4: the server never runs more than 2; the cell is flagged with what really ran.
        assert flags[4]["admission_limited"] is True
        assert flags[4]["achieved_concurrency"] == 2 and flags[4]["steady_state"]["engine_max_running"] == 2
        assert flags[4]["engine_gauges"]["state"] == "found"
        # toy:generated_tokens is the engine side of token reconciliation.
        assert flags[1]["tokens"]["engine"] is not None and flags[1]["tokens"]["agree"] is True
        report = run_cli("report", "--db", str(db), "--format", "markdown", env=env)
        assert report.returncode == 0, report.stderr
        assert "ran at most 2 of 4" in report.stdout
        assert dict(con.execute("SELECT concurrency, status FROM cells").fetchall())[4] == "admission_limited"
    finally:
        server.stop()


def test_toy_package_own_test_passes_with_the_kit_only(toy_env):
    """Step 9: the package's own test, run as its author would (pytest in the package), the plugin installed."""
    tmp, env = toy_env
    src = tmp / "src"
    text = (src / "test_infermatrix_toy.py").read_text()
    imports = {ln.split()[1] for ln in text.splitlines() if ln.startswith(("import ", "from "))}
    assert imports == {"infermatrix_toy", "infermatrix.testing"}  # the kit only
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(src), str(src / "test_infermatrix_toy.py")],
        capture_output=True, text=True, cwd=src, timeout=240, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
