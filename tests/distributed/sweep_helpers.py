"""Helpers for the sweep tests: tiny sim configs on disk, the database read back in SQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from imxtest import in_ci


def sim_config(path: Path, name: str, concurrency: list[int], duration_s: float = 1.0) -> Path:
    """A launch-mode config for the built-in tiny sim profile: one 1K row, no prefill, short cells.

    check_client and the pace rule are off: on a loaded 2-core machine a cell may be judged client-bound or
    paced, which is not what these tests are about (tests/reliability/rel_helpers.py says the same)."""
    conc = ", ".join(str(n) for n in concurrency)
    path.write_text(
        f'name = "{name}"\n[engine]\nkind = "sim"\nprofile = "tiny"\nready_timeout_s = 60\n'
        f'[matrix]\ncontexts = ["1K"]\nprefill_contexts = []\nconcurrency = [{conc}]\nduration_s = {duration_s}\n'
        "max_output = 16\ncheck_client = false\n[validity]\nmin_active_fraction = 0.0\n"
    )
    return path


def rows(db: Path, sql: str, *params: Any) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def runs_by_name(db: Path) -> dict[str, dict[str, Any]]:
    """Each run's id, status, error and cells by status, keyed by its config's name."""
    out = {}
    for rid, name, status, error in rows(db, "SELECT run_id, config->>'$.name', status, error FROM runs ORDER BY 2"):
        cells = dict(rows(db, "SELECT status, count(*) FROM cells WHERE run_id = ? GROUP BY status", rid))
        out[name] = {"run_id": rid, "status": status, "error": error, "cells": cells}
    return out


def need_ray(ray: Any) -> None:
    """The Ray tests cannot run without Ray: skip on a developer's machine, FAIL under CI=true (the test extra
    lists ray, so its absence there is a broken set-up, and a skip would be a check that cannot fail)."""
    if ray is None:
        if in_ci():
            pytest.fail("ray is not installed under CI=true: the test extra lists it (pip install -e '.[test]')", pytrace=False)
        pytest.skip("ray not installed (pip install 'infermatrix[ray]'): the Ray sweep tests need a local Ray cluster")
