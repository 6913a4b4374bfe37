from __future__ import annotations

import pytest

from infermatrix.core.store import Store


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "results.duckdb"


@pytest.fixture
def store(db_path):
    s = Store(db_path)
    yield s
    s.close()
