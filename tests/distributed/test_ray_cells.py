"""A decode cell split over 3 Ray actors on a local 3-node cluster, against a real sim over loopback: the cell's
total tok/s matches the sim's own record of the window (GET /debug/window) within 1 %, with every actor's clock
as is and with one actor's clock skewed by +40 ms and 50 ppm (the test knob INFERMATRIX_RAY_CLOCK_SKEW), whose
offset the coordinator must recover within its stated uncertainty."""

from __future__ import annotations

import json
import os
import time

import duckdb
import httpx
import pytest
from imxtest import SimServer, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.solo, pytest.mark.holds("ray")]  # 128 streams need the cores; a Ray cluster beside another breaks (tests/solo.py)

STREAMS = int(os.environ.get("INFERMATRIX_RAY_TEST_STREAMS", "128"))
SKEW = {"actor": 1, "offset_ns": 40_000_000, "drift_ppm": 50.0}
RUNS = {"plain": {}, "skewed": {"INFERMATRIX_RAY_CLOCK_SKEW": f"{SKEW['actor']}:{SKEW['offset_ns']}:{SKEW['drift_ppm']}"}}


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray")
    # Room for every stream (1K prompt + 256 output each, distinct prompts) and 4 ms steps, as the workers' fidelity test.
    profile = tmp / "p.toml"
    profile.write_text(f'base = "tiny"\nkv_tokens = {STREAMS * 1536}\nmax_num_seqs = {STREAMS}\nprefix_cache_tokens = {STREAMS * 1536}\nstep_base_ms = 4.0\n')
    server = SimServer(str(profile), tmp / "sim.log")
    try:
        out = {}
        for name, env in RUNS.items():
            db = tmp / f"{name}.duckdb"
            t0 = time.monotonic()
            proc = run_cli("run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", str(STREAMS),
                           "--duration", "4", "--max-output", "256", "--db", str(db), "--set", "client.backend=ray",
                           "--set", f"client.ray_address={ray_cluster}", "--set", "client.hosts=3", env=env, timeout=420)  # fmt: skip
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            print(f"\n{name}: run of {STREAMS} streams over 3 actors took {time.monotonic() - t0:.1f} s")
            out[name] = db
        yield server, out
    finally:
        server.stop()


def _cell(db):
    con = duckdb.connect(str(db), read_only=True)
    cols = ["run_id", "status", "reason", "total_tps", "output_tokens", "window_start", "window_end", "flags"]
    row = dict(zip(cols, con.execute(f"SELECT {', '.join(cols)} FROM cells").fetchone()))
    row["flags"] = json.loads(row["flags"])
    hosts = con.execute("SELECT * FROM cell_hosts ORDER BY host").fetchall()
    host_cols = [d[0] for d in con.description]
    con.close()
    return row, [dict(zip(host_cols, h)) for h in hosts]


@pytest.mark.parametrize("name", list(RUNS))
def test_total_tps_matches_the_sims_record(runs, name):
    server, dbs = runs
    cell, hosts = _cell(dbs[name])
    # A host whose loop stalled (this machine's 2 cores run 3 raylets, 3 actors, the sim and the coordinator) may make the
    # cell client_bound, naming it. As everywhere in the suite (tests/fidelity/bars.py `judged`), a valid cell is held to
    # the 1 % bar and only a cell the product disowned may miss it; beside a CPU burner an actor read its streams late at
    # the window's end and the cell, rightly disowned, counted 1.5–4.1 % fewer tokens than the sim's record.
    assert cell["status"] in ("valid", "client_bound"), (cell["status"], cell["reason"])
    record = httpx.get(f"{server.base_url}/debug/window", params={"start": cell["window_start"], "end": cell["window_end"]}, timeout=30).json()
    err = (cell["total_tps"] - record["total_tps"]) / record["total_tps"]
    if cell["status"] == "valid":
        assert abs(err) < 0.01, (cell["total_tps"], record["total_tps"], cell["flags"].get("hosts"))
    else:
        # (or the engine's count of the window, known too roughly to confirm the client's: measure/selfcheck.py)
        assert any(k in cell["reason"] for k in ("client host", "client stamps", "window count is unsettled")), cell["reason"]
        if "fewer tokens in the window" in cell["reason"]:  # the shortfall it disowned the cell for is in the sim's record too
            assert err < 0, (cell["total_tps"], record["total_tps"], cell["reason"])
    # Three actors on three distinct nodes, every stream on one of them, the hosts' tokens adding up to the cell's.
    assert len(hosts) == 3 and len({h["host"].split("#")[0] for h in hosts}) == 3, hosts
    assert sum(h["streams"] for h in hosts) == STREAMS
    assert sum(h["output_tokens"] for h in hosts) == cell["output_tokens"]
    assert cell["flags"]["client_backend"] == "ray"


def test_injected_offset_is_recovered_within_its_uncertainty(runs):
    _, dbs = runs
    cell, hosts = _cell(dbs["skewed"])
    by_actor = {h["actor"]: h for h in cell["flags"]["hosts"]}
    skewed = by_actor[SKEW["actor"]]
    inj = skewed["injected"]
    assert inj is not None and abs(inj["offset_s"] - 0.040) < 1e-9 and abs(inj["drift"] - 50e-6) < 1e-12
    for est in skewed["estimates"]:  # before and after the cell: the truth at that moment is within ± uncertainty
        truth_ms = 1000 * (inj["offset_s"] + inj["drift"] * (est["at"] - inj["epoch"]))
        assert abs(est["offset_ms"] - truth_ms) <= est["uncertainty_ms"], (est, truth_ms)
    # The fitted drift agrees with 50 ppm within what two estimates a window apart can tell.
    assert abs(skewed["drift_ppm"] - 50.0) <= skewed["drift_uncertainty_ppm"], skewed
    for a, h in by_actor.items():  # the other hosts' clocks are the coordinator's own (one machine)
        if a != SKEW["actor"]:
            assert abs(h["offset_ms"]) <= h["uncertainty_ms"], h
