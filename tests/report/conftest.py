from __future__ import annotations

import copy as copy_module
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Share the result builders with the store tests (tests/ is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from imx_factories import fill_run  # noqa: E402

from infermatrix.core.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# A small real run against the sim: 8K is a context the reference page has too. Windows of 3 s: the client verdict
# disowns a cell whose stamps ran more than 1 % of its window late, and beside a CPU burner on two cores all three
# tries at 1 s came out client_bound (stamps 12-74 ms late, 2026-12-07): 30 ms of slack, not 10. The profile fitted
# to the reference (issue 3) is used once its config exists, else the demo profile.
FITTED = ROOT / "configs" / "sim-h200x4-qwen3.8-flash-next.toml"
SIM_RUN_ARGS = (
    str(FITTED) if FITTED.exists() else "configs/demo-sim.toml", "--set", "matrix.duration_s=3",
    "--set", "matrix.contexts=[1024,8192]", "--set", "matrix.concurrency=[1,2]",
    "--set", "matrix.prefill_contexts=[1024,8192]", "--set", "matrix.max_output=256",
)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "report.duckdb")
    yield s
    s.close()


@pytest.fixture(scope="session")
def filled_template(tmp_path_factory):
    """The reference-like run, built once (a second of inserts), copied by each test that wants it."""
    path = tmp_path_factory.mktemp("filled") / "template.duckdb"
    with Store(path) as s:
        run_id, cells, prefill = fill_run(s)
    return path, run_id, cells, prefill


@pytest.fixture
def filled(tmp_path, filled_template):
    """A completed reference-like run in a database of the test's own: (store, run_id, cells, prefill)."""
    path, run_id, cells, prefill = filled_template
    copy = tmp_path / "filled.duckdb"
    shutil.copyfile(path, copy)
    s = Store(copy)
    yield s, run_id, copy_module.deepcopy(cells), copy_module.deepcopy(prefill)
    s.close()


@pytest.fixture(scope="session")
def sim_run_db(tmp_path_factory) -> tuple[Path, str]:
    """A database holding one real `infermatrix run` against the sim (built once per session):
    (path, run_id). Tests copy it before writing to it."""
    root = tmp_path_factory.mktemp("simrun")
    for attempt in range(3):
        db = root / f"sim-{attempt}.duckdb"
        proc = subprocess.run(
            [sys.executable, "-m", "infermatrix", "run", *SIM_RUN_ARGS, "--db", str(db)],
            capture_output=True, text=True, cwd=ROOT, timeout=180, env={**os.environ, "COLUMNS": "200"},
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        with Store(db, read_only=True) as s:
            run_id = s.latest_run_id()
            shared = s.query("SELECT count(*) FROM decode_matrix WHERE run_id = ? AND context_tokens = 8192 "
                             "AND status = 'valid'", [run_id])[1][0][0]
        # On a loaded 2-core machine the client can set the pace, and the run rightly marks such
        # cells client_bound; the comparison tests need an 8K cell the reference page has too.
        if shared:
            return db, run_id
    pytest.fail(f"three sim runs without a valid 8K cell (client-bound machine?): {proc.stdout[-2000:]}")
