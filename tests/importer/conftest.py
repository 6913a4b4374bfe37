from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Share the result builders with the store tests (tests/ is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from infermatrix.core.store import Store  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def page_path() -> Path:
    """The reference page's text (a copy of ../shared/reference, which CI checkouts lack)."""
    return DATA / "vllm-h200x4-qwen3.8-flash-next.txt"


@pytest.fixture
def page_text(page_path) -> str:
    return page_path.read_text(encoding="utf-8")


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "import.duckdb")
    yield s
    s.close()
