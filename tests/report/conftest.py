from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Share the result builders with the store tests (tests/ is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from imx_factories import fill_run  # noqa: E402

from infermatrix.core.store import Store  # noqa: E402


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "report.duckdb")
    yield s
    s.close()


@pytest.fixture
def filled(store):
    """A completed reference-like run: (store, run_id, cells, prefill)."""
    run_id, cells, prefill = fill_run(store)
    return store, run_id, cells, prefill
