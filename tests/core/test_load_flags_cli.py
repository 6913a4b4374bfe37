"""`infermatrix run --rate …` (docs/load.md): the flags reach the run as open-loop points, through the real command
line against a launched sim, and their mistakes are one line (exit 2)."""

from __future__ import annotations

import duckdb
import pytest
from imxtest import run_cli

from infermatrix.cli.load_flags import apply_load_flags
from infermatrix.core.config import ConfigError

SMALL = ("--engine", "sim", "--set", "engine.profile=tiny", "--contexts", "1K", "--concurrency", "1",
         "--duration", "1", "--max-output", "16")  # fmt: skip


def test_flags_become_load_points():
    data: dict = {}
    apply_load_flags(data, "2, 4", "gamma:0.5", "3", "8")
    assert data["load"] == [{"rate": 2.0, "arrival": "gamma:0.5", "duration_s": 3.0, "max_in_flight": 8},
                            {"rate": 4.0, "arrival": "gamma:0.5", "duration_s": 3.0, "max_in_flight": 8}]  # fmt: skip
    untouched: dict = {"load": [{"rate": 1}]}
    apply_load_flags(untouched, None, None, None, None)
    assert untouched == {"load": [{"rate": 1}]}
    with pytest.raises(ConfigError, match=r"--arrival: give --rate too"):
        apply_load_flags({}, None, "poisson", None, None)


@pytest.mark.slow  # launches the sim through the command line
def test_rate_flag_runs_open_loop_points(tmp_path):
    db = tmp_path / "r.duckdb"
    proc = run_cli("run", *SMALL, "--rate", "4,8", "--load-duration", "2", "--arrival", "constant", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    points = con.execute("SELECT requested_rate, arrival, duration_s, scheduled, sent, status FROM points ORDER BY requested_rate").fetchall()
    sent = con.execute("SELECT count(*) FROM point_requests").fetchone()[0]
    con.close()
    # Constant arrivals at 4/s and 8/s for 2 s: 8 and 16 requests scheduled, every one sent.
    assert [(r, a, d, s) for r, a, d, s, _, _ in points] == [(4.0, "constant", 2.0, 8), (8.0, "constant", 2.0, 16)]
    assert all(s == sch for _, _, _, sch, s, _ in points) and sent == 24
    assert {st for *_, st in points} <= {"valid", "client_bound"}


@pytest.mark.slow  # the real command line, as a process
@pytest.mark.parametrize(
    "args, says",
    [
        (("--rate", "0"), "--rate: must be greater than 0 (got 0)"),
        (("--rate", "two"), "--rate: 'two' is not a number"),
        (("--max-in-flight", "4"), "--max-in-flight: give --rate too"),
        (("--rate", "2", "--arrival", "weibull"), "--arrival:"),
    ],
)
def test_bad_load_flags_are_one_line(tmp_path, args, says):
    proc = run_cli("run", *SMALL, *args, "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert says in line, line
    assert not (tmp_path / "r.duckdb").exists()  # found before anything started


@pytest.mark.slow  # the real command line, as a process
def test_rate_is_not_for_resume(tmp_path):
    proc = run_cli("run", "--resume", "abc", "--rate", "2", "--db", str(tmp_path / "r.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2 and "--rate: not with --resume" in proc.stderr, proc.stderr[-2000:]


def test_a_run_of_load_points_alone_needs_no_matrix():
    """issue 20: a run is a plan of load points; the matrix is one kind. Empty matrix and no point: one line."""
    from infermatrix.core.registry import validate_config
    from infermatrix.testing import plugin_manager

    pm = plugin_manager()
    engine = {"kind": "openai", "base_url": "http://h:1"}
    empty = {"contexts": [], "prefill_contexts": []}
    cfg = validate_config(pm, {"engine": engine, "matrix": empty, "load": [{"rate": 2, "context": "1K"}]}, "t")
    assert cfg.matrix.contexts == [] and len(cfg.load) == 1
    with pytest.raises(ConfigError, match=r"^t: nothing to measure: matrix.contexts and matrix.prefill_contexts are empty"):
        validate_config(pm, {"engine": engine, "matrix": empty}, "t")


@pytest.mark.slow  # launches the sim through the command line
def test_rate_points_alone_run_end_to_end(tmp_path):
    db = tmp_path / "r.duckdb"
    proc = run_cli("run", "--engine", "sim", "--set", "engine.profile=tiny", "--set", "matrix.contexts=[]", "--set", "matrix.prefill_contexts=[]",
                   "--set", "matrix.max_output=16", "--rate", "4", "--load-duration", "2", "--arrival", "constant", "--db", str(db), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    points = con.execute("SELECT scheduled, sent, status FROM points").fetchall()
    cells = con.execute("SELECT count(*) FROM cells").fetchone()[0] + con.execute("SELECT count(*) FROM prefill").fetchone()[0]
    con.close()
    assert cells == 0 and [(s, t) for s, t, _ in points] == [(8, 8)]


@pytest.mark.slow  # a sim server and the real command line, as processes
def test_max_output_reaches_every_rate_point_and_a_points_own_value_wins(tmp_path, sim_factory):
    """issue 27 item 1: `--max-output 32` set the matrix's cap, but the `--rate` points sent max_tokens 256 (LoadConfig's
    default). Judged by what the SERVER was asked and did (the sim's /debug/truth) and what was stored: a --rate point,
    and a config's [[load]] points (one with its own max_output, which wins over the flag)."""
    sim = sim_factory("tiny")
    attach = ("--base-url", sim.base_url, "--set", "matrix.contexts=[]", "--set", "matrix.prefill_contexts=[]", "--max-output", "32")
    db = tmp_path / "r.duckdb"
    proc = run_cli("run", *attach, "--rate", "4", "--arrival", "constant", "--load-duration", "1", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = tmp_path / "points.toml"
    config.write_text('[engine]\nkind = "auto"\n\n[[load]]\nrate = 4\narrival = "constant"\nduration_s = 1\nmax_output = 8\n\n'
                      '[[load]]\nrate = 4\narrival = "constant"\nduration_s = 1\n')  # fmt: skip
    proc = run_cli("run", str(config), *attach, "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    truth = {r["request_id"]: r for r in sim.truth()["requests"]}
    con = duckdb.connect(str(db), read_only=True)
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()]
    stored = con.execute("SELECT run_id, point, max_output FROM points").fetchall()
    reqs = con.execute("SELECT run_id, point, request_id, output_tokens FROM point_requests").fetchall()
    con.close()
    want = {(runs[0], 0): 32, (runs[1], 0): 8, (runs[1], 1): 32}
    assert {(r, p): m for r, p, m in stored} == want
    assert len(reqs) == 12 and {(r, p) for r, p, *_ in reqs} == set(want)
    for run_id, point, request_id, output_tokens in reqs:
        server = truth[request_id]
        assert server["max_tokens"] == want[(run_id, point)] == server["output_tokens"] == output_tokens
