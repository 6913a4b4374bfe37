"""A report's GPU-hour price (issue 27 item 5): `report --gpu-hour-price 3` silently replaced the stored $2.50, so
later reports and the cookbook's cost query used $3, and no report said which price it used. Now a price given
to report or compare prices that report only (nothing stored; the report says "priced at $3.00/GPU-hour for this
report (stored: $2.50)"), `--store-price` stores it and says what it replaced, and every report names its price."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from imx_factories import REFERENCE_VALID, fill_run, make_cell  # noqa: E402

from infermatrix.core.report import render_markdown  # noqa: E402
from infermatrix.core.store import Store  # noqa: E402
from infermatrix.core.store.slo_store import price_this_session, save_gpu_hour_price  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _db(path: Path) -> tuple[str, str]:
    """Run a (4 GPUs, $2.50 stored) and run b (8 GPUs, $4.00 from its config's hardware.gpu_hour_usd)."""
    with Store(path) as s:
        a, _, _ = fill_run(s, seed=1, other=False)
        b = s.create_run({"engine": "sglang", "model": "qwen", "hardware": {"gpu_count": 8}, "config": {"hardware": {"gpu_hour_usd": 4.0}}})
        for key in REFERENCE_VALID:
            s.save_cell(b, make_cell(*key, seed=2, scale=1.3)[0])
        save_gpu_hour_price(s, a, 2.5)
    return a, b


def test_a_price_for_this_session_changes_no_stored_data(tmp_path):
    a, b = _db(tmp_path / "p.duckdb")
    with Store(tmp_path / "p.duckdb", read_only=True) as s:  # no write needed
        price_this_session(s, 3.0)
        got = {r: s.query("SELECT gpu_hour_usd, gpu_hour_source, stored_gpu_hour_usd FROM run_gpus WHERE run_id = ?", [r])[1] for r in (a, b)}
        assert got == {a: [(3.0, "report", 2.5)], b: [(3.0, "report", 4.0)]}
        _, rows = s.query("SELECT usd_per_mtok, tps_per_gpu FROM frontier WHERE run_id = ?", [a])
        assert rows and all(usd == pytest.approx(3.0 / (gpu * 3600 / 1e6)) for usd, gpu in rows)
        md = render_markdown(s, a)
        assert "priced at $3.00/GPU-hour for this report (stored: $2.50)" in md
        price_this_session(s, None)
        assert s.query("SELECT gpu_hour_usd, gpu_hour_source FROM run_gpus WHERE run_id = ?", [b])[1] == [(4.0, "config")]
        assert "priced at $2.50/GPU-hour (stored with the run)" in render_markdown(s, a)
        assert "priced at $4.00/GPU-hour (the config's hardware.gpu_hour_usd)" in render_markdown(s, b)
    with Store(tmp_path / "p.duckdb") as s:
        assert s.query("SELECT run_id, gpu_hour_usd FROM run_costs")[1] == [(a, 2.5)]
        unpriced = s.create_run({"engine": "x", "model": "m", "hardware": {"gpu_count": 1}})
        s.save_cell(unpriced, make_cell(8192, 1, seed=3)[0])
        assert "no GPU-hour price, so no cost" in render_markdown(s, unpriced)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "infermatrix", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.slow  # runs the command line
def test_report_and_compare_price_only_what_they_print_unless_asked_to_store(tmp_path):
    db = tmp_path / "p.duckdb"
    a, b = _db(db)
    done = cli("report", a, "--db", str(db), "--gpu-hour-price", "3", "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {k: doc["slo"]["price"][k] for k in ("gpu_hour_usd", "gpu_hour_source", "stored_gpu_hour_usd")} == {
        "gpu_hour_usd": 3.0, "gpu_hour_source": "report", "stored_gpu_hour_usd": 2.5}
    assert doc["slo"]["frontier"] and all(f["gpu_hour_usd"] == 3.0 for f in doc["slo"]["frontier"])
    text = cli("report", a, "--db", str(db), "--gpu-hour-price", "3").stdout
    assert "priced at $3.00/GPU-hour for this report (stored: $2.50)" in text
    compared = cli("compare", a, b, "--db", str(db), "--gpu-hour-price", "3")
    assert compared.returncode == 0 and "priced at $3.00/GPU-hour for this report" in compared.stdout
    with Store(db, read_only=True) as s:  # nothing was stored: the views price at what the runs hold
        assert s.query("SELECT run_id, gpu_hour_usd FROM run_costs")[1] == [(a, 2.5)]
        assert s.query("SELECT DISTINCT gpu_hour_usd FROM frontier WHERE run_id = ?", [a])[1] == [(2.5,)]
    assert "priced at $2.50/GPU-hour (stored with the run)" in cli("report", a, "--db", str(db)).stdout

    stored = cli("compare", a, b, "--db", str(db), "--gpu-hour-price", "3", "--store-price")
    assert stored.returncode == 0, stored.stderr
    assert f"run {a}: GPU-hour price stored: $3.00, was $2.50" in stored.stderr
    assert f"run {b}: GPU-hour price stored: $3.00, was $4.00 from the config's hardware.gpu_hour_usd" in stored.stderr
    assert "priced at $3.00/GPU-hour (stored with the run)" in stored.stdout
    with Store(db, read_only=True) as s:
        assert sorted(s.query("SELECT run_id, gpu_hour_usd FROM run_costs")[1]) == sorted([(a, 3.0), (b, 3.0)])

    bad = cli("report", a, "--db", str(db), "--store-price")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --store-price: give the price to store with --gpu-hour-price"
