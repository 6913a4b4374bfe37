"""Issue 32 against the sim, through the real command line: the engine's metrics read as a time series at the asked
rate through every cell, its own token rate agreeing with the client's, a preempting sim flagging its cells; NVML
faked at its boundary (tests/fake_nvml/pynvml.py on the launched run's PYTHONPATH) giving exact energy per cell and
the throttled flag; NVML without permission and a metrics page failing mid-run each said in one line, the run going on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pytest

from imxtest import run_cli

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).parents[1] / "fake_nvml")
INTERVAL_S = 0.5
POWER_W = (300.0, 150.0)
KWH_USD = 0.2


def _rows(db: Path, sql: str) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


def _run(db: Path, profile: str, concurrency: str, duration: int, env: dict, *extra: str):
    return run_cli("run", "--engine", "sim", "--set", f"engine.profile={profile}", "--contexts", "1K", "--prefill-contexts", "1K",
                   "--concurrency", concurrency, "--duration", str(duration), "--max-output", "512", "--db", str(db),
                   "--set", f"telemetry.engine_interval_s={INTERVAL_S}", "--set", f"telemetry.gpu_interval_s={INTERVAL_S}", *extra,
                   env=env, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One run on the tiny sim with two fake GPUs (300 W and 150 W) that report a power cap from throttle_at on."""
    db = tmp_path_factory.mktemp("tel") / "tel.duckdb"
    throttle_at = time.monotonic() + 12  # CLOCK_MONOTONIC: the launched run's clock too (Linux)
    script = {"power_w": list(POWER_W), "throttle_after_mono": throttle_at, "throttle_mask": 0x4}
    proc = _run(db, "tiny", "1,4,8", 5, {"PYTHONPATH": FAKE, "FAKE_NVML": json.dumps(script)}, "--set", f"hardware.kwh_usd={KWH_USD}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return db, throttle_at


def test_engine_series_at_the_asked_rate_through_every_cell_and_its_rate_agrees_with_the_client(measured):
    db, _ = measured
    cells = _rows(db, "SELECT * FROM engine_cells ORDER BY concurrency")
    assert [c["concurrency"] for c in cells] == [1, 4, 8]
    for c in cells:
        assert c["samples"] >= 0.9 * c["window_s"] / INTERVAL_S, c
        assert c["client_tps"] is not None and abs(c["engine_vs_client"]) <= 0.01, c  # the engine's own count, within 1 %
        assert c["held_back"] is False and c["preemptions"] == 0 and c["waiting_max"] == 0 and 0 < c["kv_peak_pct"] < 100
        reads = [r["t_mono"] for r in _rows(db, f"SELECT DISTINCT t_mono FROM engine_samples WHERE unit = '{_unit(db, c)}' ORDER BY 1")]
        assert len(reads) >= 2 and max(b - a for a, b in zip(reads, reads[1:])) < 2 * INTERVAL_S  # no gap through the cell
    timeline = _rows(db, "SELECT phase, metric, rate FROM engine_timeline WHERE metric = 'generated_tokens' AND phase = 'measure' AND rate IS NOT NULL")
    assert timeline and all(r["rate"] > 0 for r in timeline)
    cost = _rows(db, "SELECT * FROM telemetry_costs ORDER BY source")
    assert [c["source"] for c in cost] == ["engine", "gpu"] and all(c["reads"] > 0 and c["failures"] == 0 for c in cost)


def _unit(db: Path, cell: dict) -> str:
    return _rows(db, f"SELECT any_value(unit) AS u FROM engine_samples WHERE concurrency = {cell['concurrency']} AND context_tokens = 1024")[0]["u"]


def test_fake_nvml_gives_exact_energy_per_cell_and_the_throttled_flag(measured):
    db, throttle_at = measured
    cells = {c["concurrency"]: c for c in _rows(db, "SELECT g.*, c.window_start, c.window_end, d.total_tps FROM gpu_cells g "
                                                    "JOIN cells c USING (run_id, context_tokens, concurrency) "
                                                    "JOIN decode_matrix d USING (run_id, context_tokens, concurrency)")}  # fmt: skip
    assert sorted(cells) == [1, 4, 8]
    total_w = sum(POWER_W)
    for c in cells.values():
        assert c["gpus"] == 2
        assert c["energy_j"] == pytest.approx(total_w * c["window_s"], rel=1e-4)  # the counter's rise over the window
        assert c["avg_w_per_gpu"] == pytest.approx(total_w / 2, rel=1e-4)
        assert c["tok_per_j"] == pytest.approx(c["total_tps"] / total_w, rel=1e-4)
        assert c["j_per_mtok"] == pytest.approx(1e6 * total_w / c["total_tps"], rel=1e-4)
        if c["window_end"] < throttle_at:
            assert c["throttled"] is False and c["throttle_reasons"] is None
        elif c["window_start"] >= throttle_at:
            assert c["throttled"] is True and c["throttle_reasons"] == "sw_power_cap"
    assert any(c["throttled"] for c in cells.values())
    frontier = _rows(db, "SELECT f.concurrency, f.joules_per_mtok, f.energy_usd_per_mtok, f.usd_per_mtok FROM frontier f")
    for f in frontier:
        j = cells[f["concurrency"]]["j_per_mtok"]
        assert f["joules_per_mtok"] == pytest.approx(j) and f["energy_usd_per_mtok"] == pytest.approx(j / 3.6e6 * KWH_USD)
        assert f["usd_per_mtok"] == pytest.approx(f["energy_usd_per_mtok"])  # no GPU-hour price: the energy alone


def test_a_preempting_sim_flags_its_cells(tmp_path):
    db = tmp_path / "pre.duckdb"
    proc = _run(db, "preempt", "1,12", 3, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {c["concurrency"]: c for c in _rows(db, "SELECT * FROM engine_cells")}
    assert cells[1]["held_back"] is False and cells[1]["preemptions"] == 0
    assert cells[12]["held_back"] is True and cells[12]["preemptions"] > 0 and cells[12]["waiting_max"] > 0


def test_nvml_without_permission_and_metrics_failing_mid_run_are_said_and_the_run_goes_on(tmp_path):
    profile = tmp_path / "failing.toml"
    profile.write_text('base = "tiny"\n[faults]\n[[faults.requests]]\nkind = "http_error"\nstatus = 500\nphase = "metrics"\nfirst = 12\n')
    db = tmp_path / "fail.duckdb"
    proc = _run(db, str(profile), "1,2", 2, {"PYTHONPATH": FAKE, "FAKE_NVML": json.dumps({"init_error": "NoPermission"})})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = out.splitlines()
    assert sum("GPU telemetry: NVML present but not usable (NVMLError_NoPermission: Insufficient Permissions)" in ln for ln in lines) == 1
    assert sum("engine metrics at http://" in ln and "a read failed (HTTPStatusError" in ln for ln in lines) == 1
    assert "Traceback" not in out
    assert _rows(db, "SELECT status FROM runs")[0]["status"] == "completed"
    assert len(_rows(db, "SELECT * FROM cells")) == 2
    assert _rows(db, "SELECT count(*) AS n FROM gpu_series")[0]["n"] == 0
    assert _rows(db, "SELECT failures FROM telemetry_costs WHERE source = 'engine'")[0]["failures"] > 0


def test_a_negative_interval_is_one_line_and_exit_2(tmp_path):
    proc = run_cli("run", "--engine", "sim", "--set", "engine.profile=tiny", "--contexts", "1K", "--concurrency", "1",
                   "--db", str(tmp_path / "x.duckdb"), "--set", "telemetry.engine_interval_s=-1")  # fmt: skip
    assert proc.returncode == 2
    assert "telemetry.engine_interval_s" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
