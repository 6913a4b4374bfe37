"""Resume knows repeats (issue 30 item 2): a ``matrix.repeat = 3`` run of 1K x 1 and 1K x 2, stopped by Ctrl-C once
repeat 1 of both cells is saved, resumes with only the repeats it is missing — the ones already stored are neither
measured again nor touched — and ends with three final repeats of each cell."""

from __future__ import annotations

import re
import signal

import pytest
from rel_helpers import Cli, assert_nothing_left, query, run_cli, run_row, sim_config, write_profile

pytestmark = pytest.mark.slow  # launches the sim through the CLI

_MEASURED = re.compile(r"decode 1K × (\d+) #(\d+)\s+(\w+)")


def _final(db) -> dict[tuple[int, int], object]:
    rows = query(db, "SELECT concurrency, repeat, saved_at FROM cell_repeats WHERE status <> 'interrupted'")
    return {(n, r): saved for n, r, saved in rows}


def test_resume_measures_only_the_missing_repeats(tmp_path):
    db = tmp_path / "r.duckdb"
    cfg = sim_config(tmp_path, write_profile(tmp_path / "p.json"), repeat=3)
    cli = Cli("run", str(cfg), "--db", str(db), cwd=tmp_path)
    cli.wait_stderr(r"decode 1K × 2 #1\s+valid", timeout=60)
    cli.signal(signal.SIGINT)
    assert cli.wait(30) == 130, cli.stderr[-3000:]
    assert_nothing_left(tmp_path, cli)
    before = _final(db)
    assert {(1, 1), (2, 1)} <= set(before) and len(before) < 6, before
    run_id = run_row(db)["run_id"]

    proc = run_cli("resume", run_id, "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = {(int(n), int(r)) for n, r, _ in _MEASURED.findall(proc.stderr)}
    assert measured == {(n, r) for n in (1, 2) for r in (1, 2, 3)} - set(before), proc.stderr[-3000:]
    after = _final(db)
    assert set(after) == {(n, r) for n in (1, 2) for r in (1, 2, 3)}
    assert {k: after[k] for k in before} == before  # the stored repeats were kept as they were
    assert query(db, "SELECT concurrency, status, json_extract(flags, '$.repeats.k')::INTEGER FROM cells ORDER BY concurrency") == [
        (1, "valid", 3), (2, "valid", 3)]  # fmt: skip
    assert run_row(db)["status"] == "completed"
    assert_nothing_left(tmp_path)
